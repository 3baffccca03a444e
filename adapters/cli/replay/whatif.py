"""``tether replay --what-if CANDIDATE``: re-decide recorded history under another configuration, and say which
workloads would move.

Test a change before rolling it out. The candidate file holds any of (YAML or JSON, one or several documents, or a
``List``):

* the **plugin ConfigMap** (Volcano Global's format; a bare ``{plugin: json}`` mapping also works) — a changed
  location mapping;
* the **admission ConfigMap** (recognised by its ``volcano-scheduler.conf`` or ``queue-managed`` key) — other
  tiers, other queue-managed kinds;
* **Queues** (``scheduling.volcano.sh`` ``Queue`` objects) — other capabilities, weights, new queues.

Locality tiers come with the plugin ConfigMap (its entries' ``locality``), admission checks with the admission
ConfigMap (its ``admission-checks`` key).

tether folds the recorded events twice through the deciders — once as recorded, once with every observation of each
candidate object (and every write result carrying it) replaced by the candidate's content (a ConfigMap's ``data``,
a Queue's ``spec``; its metadata and status stay as recorded), each candidate also observed before the first event —
and reports, event by event, the commands one run issues and the other does not (:func:`what_if`).

Both runs fold the *recorded* observations, so the comparison is first-order: each difference is what tether would
have decided differently at that point given what it had actually seen then. From there :func:`moves` follows the
change **through to the bindings**, at the end of the history:

* placement — for every workload with claims, the clusters its data allows under each configuration: each claim's
  latest catalog answer mapped through the configuration's ``locationMapping`` (what the DataSource's locality would
  follow), intersected over the claims, as the decider does; then within the Ready clusters and the binding's own
  ``clusterNames``, minus its own exclusions. A workload whose clusters differ is listed with where it is scheduled
  now (``spec.clusters``, as observed) and where it could run instead;
* admission — a binding one run resumes (admits) and the other never does: "admitted → held, with the queue's
  reason" (its admission checks, when a check holds it), or the reverse;
* locality tiers — for a workload placed by tiers under the candidate (a plugin ConfigMap's ``locality``), the tier
  karmada-scheduler would place it in: the first whose clusters can hold it by their ``resourceSummary`` (a
  Divided workload's replicas, as karmada-scheduler counts them; a Duplicated one fits any Ready cluster), with the
  tiers before it that could not; a workload placed by tiers as recorded and not under the candidate is followed
  into the clusters its data allows; an admission check's clusters (``data-loaded``) narrow where it would run.
* evictions — every eviction the candidate's preemption policies would have made (:class:`Eviction`: which binding,
  for which, the policy and the reason) that the recorded run did not, and the reverse; an evicted binding is also
  listed among the moves (→ held).

What Karmada would then pick among the allowed clusters (a Divided workload may not use them all) is Karmada's: the
list names the clusters tether would allow, which is what a mapping or a queue decides.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import msgspec
import yaml

from tether.adapters.log import EventLog
from tether.core.admission.checks import CHECKS_KEY
from tether.core.admission.objects import cluster_capacities
from tether.core.commands import EvictBinding, ResumeBinding, SetAdmissionHold
from tether.core.datadependency.binding_placement import Desired
from tether.core.datadependency.decider import DecisionPass
from tether.core.datadependency.tiers import TierPlan
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import CommandSucceeded, ObjectObserved
from tether.core.keys import ADMISSION_ANNOTATION
from tether.core.kube import KubeObject, ObjectMeta, as_list, dig, raw_object
from tether.core.plugin_config import map_location
from tether.core.world import Settings, World, initial_world
from tether.core.world.admission_state import AdmissionBinding
from tether.core.world.views import CONFIGMAP, Binding
from tether.projections.admission_fold import CONFIG_KEY, MANAGED_KEY, parse_admission_binding
from tether.projections.step import step

from .rebuild import cause_offset
from .targets import workload_display
from .why import matching_prefix

QUEUE = "Queue"
QUEUE_API = "scheduling.volcano.sh/v1beta1"


class Candidate(msgspec.Struct):
    """The configuration to re-decide under: each part replaces what the log recorded of that object."""

    plugins: dict[str, str] | None = None  # the plugin ConfigMap's data
    admission: dict[str, str] | None = None  # the admission ConfigMap's data
    queues: dict[str, dict[str, Any]] = {}  # Queue name → its spec

    def describe(self) -> str:
        parts = (["the plugin ConfigMap"] if self.plugins is not None else []) + (
            ["the admission ConfigMap"] if self.admission is not None else []) + (
            [f"Queue {', '.join(sorted(self.queues))}"] if self.queues else [])
        return " and ".join(parts) or "nothing"


class WhatIfDifference(msgspec.Struct):
    event_offset: int
    event_key: str
    only_recorded_config: list[CommandRecord]
    only_candidate_config: list[CommandRecord]


class Move(msgspec.Struct):
    """A workload whose clusters (or admission) the candidate would change."""

    workload: str  # as people type it: Deployment/ml/x
    binding: str
    before: tuple[str, ...]  # where it is scheduled now (spec.clusters, as observed)
    after: tuple[str, ...]  # where the candidate would let it run (empty when held)
    why: list[str]  # per claim, the data's location and the prefix it maps through; or the queue's reason
    held: bool = False  # admission would hold it (or: held now, and admitted under the candidate)
    admitted: bool = False


class Eviction(msgspec.Struct):
    """An eviction one run decides and the other does not (``recorded``: the recorded run's)."""

    binding: str
    for_binding: str
    queue: str
    policy: str
    reason: str
    event_offset: int
    recorded: bool = False


class WhatIf(msgspec.Struct):
    differences: list[WhatIfDifference]
    moves: list[Move]
    evictions: list[Eviction] = msgspec.field(default_factory=list)


def _documents(path: str | Path) -> list[Any]:
    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out += as_list(doc.get("items"))
        else:
            out.append(doc)
    return out


def _string_map(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{where}: expected a mapping of strings")
    return dict(value)


def load_candidate(path: str | Path) -> Candidate:
    """The candidate configuration in a file (module docstring); ``ValueError`` says what is wrong."""
    candidate = Candidate()
    docs = _documents(path)
    if not docs:
        raise ValueError(f"{path}: empty: expected a ConfigMap, Queues, or a mapping of plugin name to JSON text")
    for doc in docs:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if kind == "ConfigMap":
            data = _string_map(doc.get("data") or {}, f"{path}: ConfigMap data")
            if CONFIG_KEY in data or MANAGED_KEY in data or CHECKS_KEY in data:
                candidate.admission = data
            else:
                candidate.plugins = data
        elif kind == QUEUE:
            name = dig(doc, "metadata", "name")
            spec = doc.get("spec") or {}
            if not isinstance(name, str) or not name or not isinstance(spec, dict):
                raise ValueError(f"{path}: a Queue needs metadata.name and a spec mapping")
            candidate.queues[name] = spec
        elif kind is None and isinstance(doc, dict):
            candidate.plugins = _string_map(doc, f"{path}: expected a ConfigMap manifest, Queues, or a mapping "
                                                 "of plugin name to JSON text")
        else:
            raise ValueError(f"{path}: expected a ConfigMap manifest, Queues, or a mapping of plugin name to JSON "
                             f"text, not {kind or type(doc).__name__}")
    return candidate


def _replacements(candidate: Candidate, settings: Settings) -> dict[str, KubeObject]:
    """The log key of each object the candidate replaces → the object as the candidate has it."""
    out: dict[str, KubeObject] = {}
    for data, name in ((candidate.plugins, settings.plugin_configmap),
                       (candidate.admission, settings.admission_configmap)):
        if data is not None:
            namespace, _, short = name.partition("/")
            obj = KubeObject(api_version="v1", kind=CONFIGMAP, data=data,
                             metadata=ObjectMeta(name=short, namespace=namespace, resource_version="0"))
            out[obj.key] = obj
    for name, spec in candidate.queues.items():
        obj = KubeObject(api_version=QUEUE_API, kind=QUEUE, spec=raw_object(spec),
                         metadata=ObjectMeta(name=name, resource_version="0"))
        out[obj.key] = obj
    return out


def _as_candidate(obj: KubeObject, replacement: KubeObject) -> KubeObject:
    changed = copy.copy(obj)
    changed.data = replacement.data
    if replacement.kind == QUEUE:
        changed.spec = replacement.spec
    return changed


def _candidate_stream(records: list[EventRecord], replacements: dict[str, KubeObject]) -> Iterator[EventRecord]:
    first = True
    for record in records:
        event = record.event
        if first:
            first = False
            for key, seed in sorted(replacements.items()):
                yield EventRecord(at_ms=record.at_ms, source="what-if", key=key, event=ObjectObserved(obj=seed),
                                  offset=0)
        if isinstance(event, ObjectObserved) and not event.cluster and event.obj.key in replacements:
            yield msgspec.structs.replace(record, event=ObjectObserved(
                obj=_as_candidate(event.obj, replacements[event.obj.key])))
        elif isinstance(event, CommandSucceeded) and event.result is not None and \
                event.result.key in replacements and ":" not in event.target:
            yield msgspec.structs.replace(record, event=msgspec.structs.replace(
                event, result=_as_candidate(event.result, replacements[event.result.key])))
        else:
            yield record


def _comparable(command: CommandRecord) -> bytes:
    return msgspec.json.encode(command.command)


async def what_if(log: EventLog, candidate: Candidate | dict[str, str], *, settings: Settings | None = None,
                  until_offset: int | None = None) -> WhatIf:
    """Re-decide the history up to ``until_offset`` under ``candidate`` (a plugin ConfigMap's data is taken as a
    candidate of that alone); the per-event differences and the workloads that would move."""
    if not isinstance(candidate, Candidate):
        candidate = Candidate(plugins=candidate)
    settings = settings or Settings()
    records: list[EventRecord] = []
    async for batch in log.read("events", until_offset=until_offset):
        records.extend(r for r in batch if isinstance(r, EventRecord))
    recorded_world = initial_world(settings)
    candidate_world = initial_world(settings)
    by_offset: dict[int, list[CommandRecord]] = {}
    for record in records:
        by_offset[record.offset] = step(recorded_world, record)
    differences: list[WhatIfDifference] = []
    candidate_commands: list[CommandRecord] = []
    for record in _candidate_stream(records, _replacements(candidate, settings)):
        produced = step(candidate_world, record)
        candidate_commands += produced
        if record.source == "what-if":
            continue
        baseline = by_offset.get(record.offset, [])
        a = {_comparable(c): c for c in baseline}
        b = {_comparable(c): c for c in produced}
        if a.keys() != b.keys():
            differences.append(WhatIfDifference(
                event_offset=record.offset, event_key=record.key,
                only_recorded_config=[a[k] for k in a.keys() - b.keys()],
                only_candidate_config=[b[k] for k in b.keys() - a.keys()]))
    recorded_commands = [c for commands in by_offset.values() for c in commands]
    return WhatIf(differences=differences,
                  moves=moves(recorded_world, candidate_world, recorded=recorded_commands,
                              candidate=candidate_commands, bindings=last_bindings(records)),
                  evictions=evictions(recorded=recorded_commands, candidate=candidate_commands))


def evictions(*, recorded: list[CommandRecord], candidate: list[CommandRecord]) -> list[Eviction]:
    """The evictions one run decided and the other did not, in log order (an eviction is the same when it takes
    the same binding for the same one)."""
    def of(commands: list[CommandRecord]) -> dict[tuple[str, str], CommandRecord]:
        out: dict[tuple[str, str], CommandRecord] = {}
        for record in commands:
            if isinstance(record.command, EvictBinding):
                out.setdefault((record.key, record.command.for_binding), record)
        return out

    then, now = of(recorded), of(candidate)
    out = [_eviction(record, recorded=False) for pair, record in now.items() if pair not in then]
    out += [_eviction(record, recorded=True) for pair, record in then.items() if pair not in now]
    return sorted(out, key=lambda e: (e.event_offset, e.binding))


def _eviction(record: CommandRecord, *, recorded: bool) -> Eviction:
    command = record.command
    assert isinstance(command, EvictBinding)
    return Eviction(binding=record.key, for_binding=command.for_binding, queue=command.queue, policy=command.policy,
                    reason=command.reason, event_offset=cause_offset(record.causation) or 0, recorded=recorded)


# -- through to the bindings -------------------------------------------------------------------------------


def allowed_clusters(world: World, workload: str) -> tuple[frozenset[str] | None, list[str]]:
    """The clusters the data of ``workload``'s claims allows under ``world``'s mapping (None: no constraint), and
    per claim how: its latest catalog answer through the longest matching prefix (or its DataSource's clusters
    when the catalog never answered)."""
    allowed: set[str] | None = None
    how: list[str] = []
    for key in sorted(world.claims_by_workload.get(workload, ())):
        claim = world.claims[key]
        identity = claim.identity
        if identity is None or claim.deleting:
            continue
        lookup = world.lookups.get(identity.key)
        plugin = world.plugins.plugins.get(identity.system)
        clusters: tuple[str, ...] | None = None
        if lookup is not None and lookup.kind == "resolved" and plugin is not None:
            clusters = map_location(plugin.location_mapping, lookup.location)
            prefix, _ = matching_prefix(plugin.location_mapping, lookup.location)
            how.append(f"{identity.key} at {lookup.location} → " + (
                f"prefix {prefix} → {', '.join(clusters)}" if clusters is not None
                else f"no prefix of plugin {plugin.key} matches"))
        elif claim.bound_data_source and claim.bound_data_source in world.sources:
            clusters = world.sources[claim.bound_data_source].cluster_names
            how.append(f"{identity.key}: DataSource {claim.bound_data_source} → {', '.join(clusters) or '-'}")
        if clusters is None:
            continue
        allowed = set(clusters) if allowed is None else allowed & set(clusters)
    return (frozenset(allowed) if allowed is not None else None), how


def _runnable(world: World, binding: Binding, allowed: frozenset[str] | None) -> tuple[str, ...]:
    """Where ``binding`` may run: the allowed clusters, Ready, within its own clusterNames, minus its own
    exclusions (what tether adds is not the user's)."""
    affinity = binding.placement.get("clusterAffinity")
    affinity = affinity if isinstance(affinity, dict) else {}
    names = {n for n in as_list(affinity.get("clusterNames")) if isinstance(n, str)}
    own_exclusions = {n for n in as_list(affinity.get("exclude")) if isinstance(n, str)} - set(binding.added)
    ready = {name for name, ok in world.clusters.items() if ok}
    out = ready if allowed is None else ready & allowed
    if names:
        out &= names
    return tuple(sorted(out - own_exclusions))


class _At:
    """The time a pass of the deciders reads (the last event's: what the history ends at)."""

    def __init__(self, at_ms: int) -> None:
        self.at_ms = at_ms


def _desired(world: World, binding: Binding) -> Desired:
    return DecisionPass(world, cast(EventRecord, _At(world.last_at_ms))).desired(binding)


def _fits(world: World, held: AdmissionBinding | None, clusters: set[str]) -> bool:
    """Whether karmada-scheduler would place the binding (``held``: as last observed) on ``clusters``: a Divided
    one's replicas fit their available replicas (allocatable - allocated - allocating over its per-replica
    request), a Duplicated one any Ready cluster."""
    capacities = cluster_capacities(world.admission)
    ready = [capacities[c] for c in sorted(clusters) if c in capacities and capacities[c].ready]
    if not ready:
        return False
    if held is None or not held.divided or not held.request:
        return True
    available = 0
    for cluster in ready:
        fit = [(cluster.allocatable.get(r, 0) - cluster.allocated.get(r, 0)) // amount
               for r, amount in held.request.items() if amount > 0]
        available += max(0, min(fit)) if fit else held.replicas
    return available >= held.replicas


def _tier_move(world: World, binding: Binding, held: AdmissionBinding | None
               ) -> tuple[tuple[str, ...], list[str]] | None:
    """Where ``binding`` would run under ``world``'s locality tiers and why (None: tiers do not place it)."""
    desired = _desired(world, binding)
    if not isinstance(desired, TierPlan):
        return None
    known = {name for name, ok in world.clusters.items() if ok}
    passed: list[str] = []
    for term in desired.terms:
        clusters = set(term.clusters) & known if term.clusters is not None else known
        shown = f"{term.tier} ({', '.join(sorted(clusters)) or '-'})"
        if _fits(world, held, clusters):
            return tuple(sorted(clusters)), [f"tier {shown} would hold it" + (
                f"; {', '.join(passed)} could not" if passed else "")] + ([desired.note] if desired.note else [])
        passed.append(shown)
    return (), [f"no tier would hold it: {', '.join(passed)}"]


def _admissions(commands: list[CommandRecord]) -> tuple[set[str], dict[str, str]]:
    """The bindings a run resumed, and the last hold reason it gave each."""
    resumed: set[str] = set()
    holds: dict[str, str] = {}
    for record in commands:
        command = record.command
        if isinstance(command, ResumeBinding):
            resumed.add(record.key)
        elif isinstance(command, SetAdmissionHold) and command.annotation == ADMISSION_ANNOTATION:
            holds[record.key] = command.text
    return resumed, holds


def last_bindings(records: list[EventRecord]) -> dict[str, AdmissionBinding]:
    """Each binding as last observed, read as admission reads it (its request, replicas, Divided or not)."""
    latest: dict[str, KubeObject] = {}
    for record in records:
        event = record.event
        obj = event.obj if isinstance(event, ObjectObserved) and not event.cluster else \
            event.result if isinstance(event, CommandSucceeded) and ":" not in event.target else None
        if obj is not None and obj.kind == "ResourceBinding":
            latest[obj.key] = obj
    return {key: parse_admission_binding(obj) for key, obj in latest.items()}


def moves(recorded_world: World, candidate_world: World, *, recorded: list[CommandRecord],
          candidate: list[CommandRecord], bindings: dict[str, AdmissionBinding] | None = None) -> list[Move]:
    """The workloads the candidate would move (module docstring), by binding key; ``bindings``: each as last
    observed (:func:`last_bindings`), for where karmada-scheduler would place it by tiers."""
    out: list[Move] = []
    resumed_then, _ = _admissions(recorded)
    resumed_now, holds_now = _admissions(candidate)
    evicted_then = {record.key for record in recorded if isinstance(record.command, EvictBinding)}
    evicted_now = {record.key: record.command.reason for record in candidate
                   if isinstance(record.command, EvictBinding)}
    for key, binding in sorted(recorded_world.bindings.items()):
        scheduled = tuple(sorted(binding.scheduled_clusters))
        workload = workload_display(binding.workload) if binding.workload else key
        if key in evicted_now and key not in evicted_then:
            out.append(Move(workload=workload, binding=key, before=scheduled, after=(), held=True,
                            why=[f"evicted: {evicted_now[key]}"]))
            continue
        if key in resumed_then and key not in resumed_now:
            out.append(Move(workload=workload, binding=key, before=scheduled, after=(), held=True,
                            why=[f"held: {holds_now.get(key) or 'not admitted'}"]))
            continue
        admitted = key in resumed_now and key not in resumed_then
        tiered = _tier_move(candidate_world, candidate_world.bindings.get(key, binding), (bindings or {}).get(key))
        if tiered is not None:
            after, why = tiered
            if (scheduled and set(scheduled) <= set(after)) or (not scheduled and not after):
                continue  # where it runs is in the tier it would be placed in (or nowhere either way)
            out.append(Move(workload=workload, binding=key, before=scheduled if not admitted else (), after=after,
                            why=why + (["admitted under the candidate"] if admitted else []), admitted=admitted))
            continue
        was, _ = allowed_clusters(recorded_world, binding.workload)
        will, how = allowed_clusters(candidate_world, binding.workload)
        was_tiered = isinstance(_desired(recorded_world, binding), TierPlan)
        if was == will and not admitted and not was_tiered:
            continue
        narrowed = DecisionPass(candidate_world, cast(EventRecord, _At(candidate_world.last_at_ms))).restriction(
            candidate_world.bindings.get(key, binding))
        if narrowed is not None and will is not None:
            will = will & narrowed  # (an admission check's clusters narrow it: data-loaded)
        after = _runnable(candidate_world, binding, will)
        if after == scheduled and not admitted:
            continue
        out.append(Move(workload=workload, binding=key, before=scheduled if not admitted else (), after=after,
                        why=how + (["admitted under the candidate"] if admitted else []), admitted=admitted))
    return out
