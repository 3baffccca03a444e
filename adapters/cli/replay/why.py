"""Why a workload runs where it does: the chain from the workload to the clusters its data maps to, in one answer.

tether's decision about one workload is spread over several objects, each with its own key in the log:

    workload ← ResourceBinding ← DataSourceClaims ← DataSource ← location (the catalog) ← mapping prefix → clusters

plus, when they are on, the binding webhook's and queue admission's decisions on the binding and the pod webhook's
on the workload's pods in the members. :func:`chains` walks that chain for a workload (or for the binding, the
claim or the DataSource given instead) and returns, per link, what holds now and the decision that made it so —
each as a :class:`Step` with its time, its cause (the event that led to it) and its reason.

**Where the facts come from.** The links themselves (which claims name the workload, which DataSource a claim is
bound to, the catalog's last answer, the plugin's mapping) are read from the world folded from the log (``fold``:
the stored snapshot when one covers a prefix, so a long log costs its tail): the log has no index from a workload
to its claims, and the world has exactly those indexes. The decisions are then read per key from the log's indexes
(:class:`~.trail.LogIndex`), a handful of queries per link, as ``--explain``'s trail does. "Scheduled now" is
``spec.clusters`` of the binding's latest observation (Karmada's answer, not tether's wish); tether's exclusions
are beside it.

**The workload's pods** are found in the members' pods the world holds: those of the workload's namespace that its
Job owns (a Job) or whose name begins with the workload's name and a dash (a Deployment's ``<name>-<hash>-<id>``, a
StatefulSet's ``<name>-<n>``, a Volcano Job's ``<name>-<task>-<n>``). Pods keep no link to a Deployment that the
world holds (their owner is a ReplicaSet that tether does not watch), so this is a heuristic: a workload ``a``
also claims ``a-b``'s pods. The list is capped; ``--explain <cluster>:Pod/ns/name`` gives any pod's trail.

Nothing here decides anything: it reports decisions the log recorded, with the reasons the deciders gave.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from tether.adapters.cli.record_lines import brief
from tether.core.commands import (
    AdmitRequest,
    CreateDataSource,
    EvictBinding,
    ReleasePod,
    ResumeBinding,
    SetAdmissionHold,
    SetBindingPlacement,
    SetBindingTiers,
    SuspendDispatching,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
)
from tether.core.datadependency.tiers import tier_standing
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import (
    BindingAdmissionDecided,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    ObjectDeleted,
    ObjectObserved,
    PodGateDecided,
    pod_admission_key,
)
from tether.core.identity import data_source_name
from tether.core.keys import (
    ADMISSION_ANNOTATION,
    ADMITTED_REQUEST_ANNOTATION,
    EVICTED_FOR_ANNOTATION,
    EXCLUDED_CLUSTERS_ANNOTATION,
    OVERRUN_ANNOTATION,
)
from tether.core.keys import ADMISSION_ANNOTATION as POD_ADMISSION_ANNOTATION
from tether.core.kube import KubeObject, as_list, as_mapping, dig
from tether.core.world import World
from tether.core.world.member_state import MemberPod

from .rebuild import cause_offset
from .targets import Target, workload_display
from .trail import Bounds, LogIndex, commands_by_key, events_at, events_by_key, preemption_chain

#: How many of a link's decisions are shown (the latest); the rest are counted. ``--explain KEY`` has them all.
RECENT = 3
#: How many of a workload's pods are shown.
PODS_SHOWN = 10


class Step(msgspec.Struct, frozen=True):
    """One recorded decision or observation behind a link: when, what, after what, and why."""

    at_ms: int
    what: str  # the record, briefly: "C49 data-dependency SetBindingPlacement: exclude member1,member2"
    cause: str  # the event that led to it (a command's causing event; an event's origin)
    reason: str = ""  # the decider's or webhook's reason ("" for a plain observation)
    offset: int = 0  # of the record, in its stream


class Decisions(msgspec.Struct):
    """The latest decisions of one kind on a link, and how many earlier ones are not shown."""

    steps: list[Step] = msgspec.field(default_factory=list)
    earlier: int = 0


class DataLink(msgspec.Struct):
    """One claim's part of the chain: claim → DataSource → location → mapping prefix → clusters."""

    claim: str  # the claim's key ("" when the chain starts at a DataSource)
    claim_state: str
    claim_status: Decisions
    identity: str  # system/type/name
    source: str  # the DataSource's key ("" when there is none)
    source_state: str
    source_clusters: tuple[str, ...]
    source_decisions: Decisions
    location: str  # the catalog's latest answer ("" when it has none)
    location_state: str
    catalog: Decisions
    prefix: str  # the mapping prefix the location matches ("" when none does)
    mapped: tuple[str, ...]  # the clusters that prefix maps to
    mapping_state: str
    mapping: Decisions  # the plugin ConfigMap's latest observation


class BindingLink(msgspec.Struct):
    key: str
    observed: Step | None  # the latest observation (or write result) of the binding
    scheduled: tuple[str, ...]  # spec.clusters of that observation: where Karmada scheduled it
    deleted: bool
    excluded: tuple[str, ...]  # what tether added to its cluster affinity (its annotation)
    placement: Decisions  # SetBindingPlacement, SetBindingTiers
    admission_state: str
    admission: Decisions  # the webhook's answers, ResumeBinding, SetAdmissionHold, evictions, growth
    tier: str = ""  # which locality tier it is in and why ("" when tiers do not place it)


class PodLink(msgspec.Struct):
    key: str
    state: str
    decisions: Decisions  # the pod webhook's answer, ReleasePod


class Chain(msgspec.Struct):
    subject: str  # the workload as people type it (Deployment/ml/x), or the DataSource's key
    workload: str  # the workload key (group/Kind/ns/name); "" for a DataSource's chain
    bindings: list[BindingLink]
    data: list[DataLink]
    pods: list[PodLink]
    pods_not_shown: int = 0
    claims_of_source: list[str] = msgspec.field(default_factory=list)  # a DataSource's chain: who uses it


def matching_prefix(mapping: Iterable[tuple[str, tuple[str, ...]]], location: str) -> tuple[str, tuple[str, ...]]:
    """The prefix of ``mapping`` that decides ``location`` and its clusters — the longest that matches, as
    ``core.plugin_config.map_location`` chooses (``("", ())`` when none does)."""
    best: tuple[str, tuple[str, ...]] = ("", ())
    for prefix, clusters in mapping:
        if location.startswith(prefix) and (not best[0] or len(prefix) > len(best[0])):
            best = (prefix, tuple(clusters))
    return best


def workloads_of(world: World) -> set[str]:
    """Every workload key a binding's ``spec.resource`` or a claim's ``spec.workload`` names."""
    return {b.workload for b in world.bindings.values() if b.workload} | {
        c.workload for c in world.claims.values() if c.workload}


class _Reader:
    """The log's records for the chain, read once per key and bounded like the rest of ``--explain``."""

    def __init__(self, index: LogIndex, bounds: Bounds) -> None:
        self.index, self.bounds = index, bounds
        self._events: dict[str, list[EventRecord]] = {}
        self._commands: dict[str, list[CommandRecord]] = {}
        self._at: dict[int, EventRecord] = {}

    async def events(self, key: str) -> list[EventRecord]:
        if key not in self._events:
            self._events[key] = await events_by_key(self.index, key, self.bounds)
        return self._events[key]

    async def commands(self, key: str) -> list[CommandRecord]:
        """The commands targeting ``key`` that events in range caused."""
        if key not in self._commands:
            bounds = self.bounds
            self._commands[key] = [
                c for c in await commands_by_key(self.index, key)
                if (bounds.until_offset is None or (cause_offset(c.causation) or 0) <= bounds.until_offset)
                and (bounds.until_ms is None or c.at_ms <= bounds.until_ms)]
        return self._commands[key]

    async def event_at(self, offset: int) -> EventRecord | None:
        if offset not in self._at:
            for record in await events_at(self.index, [offset], Bounds()):
                self._at[record.offset] = record
        return self._at.get(offset)

    async def command_step(self, command: CommandRecord, *, link: str = "") -> Step:
        """``link``: the key of the link the step is shown under (not repeated in the record)."""
        offset = cause_offset(command.causation)
        cause = await self.event_at(offset) if offset is not None else None
        said = brief(cause) if cause is not None else (f"event {command.causation}" if command.causation else "-")
        return Step(at_ms=command.at_ms, what=brief(command, with_key=command.key != link), cause=said,
                    reason=command.reason, offset=command.offset)

    async def event_step(self, event: EventRecord, *, link: str = "", reason: str | None = None) -> Step:
        return Step(at_ms=event.at_ms, what=brief(event, with_key=event.key != link), cause=await self._origin(event),
                    reason=_event_reason(event) if reason is None else reason, offset=event.offset)

    async def _origin(self, event: EventRecord) -> str:
        """What led to an event: the command it answers (an outcome, a catalog answer), or where it came from."""
        match event.event:
            case BindingAdmissionDecided(operation=op, decided_at=at):
                return f"the API server's {op} of the binding; decided from the world as of E{at}"
            case PodGateDecided(cluster=cluster, decided_at=at):
                return f"member {cluster}'s pod CREATE; decided from the world as of {at or '-'}"
            case ObjectObserved() | ObjectDeleted():
                return f"observed by {event.source}"
        if event.causation and cause_offset(event.causation) is None:  # a command id: find the command it answers
            for command in await self.commands(event.key):
                if command.id == event.causation:
                    return f"answer to {brief(command, with_key=False)}"
        if event.source == "push":
            return "a push notification (POST /v1/notifications/table-moved)"
        return f"from {event.source}"

    async def decisions(self, key: str, kinds: tuple[type, ...], *, events: tuple[type, ...] = (),
                        recent: int = RECENT, chain: bool = False) -> Decisions:
        """The latest commands of ``kinds`` targeting ``key`` and events of ``events`` keyed by it, in log time;
        ``chain``: with the other side of the binding's evictions (``trail.preemption_chain``)."""
        picked: list[EventRecord | CommandRecord] = [c for c in await self.commands(key)
                                                     if isinstance(c.command, kinds)]
        if chain:
            picked += await preemption_chain(self.index, key, [c for c in picked if isinstance(c, CommandRecord)])
        if events:
            picked += [e for e in await self.events(key) if isinstance(e.event, events)]
        picked.sort(key=lambda r: (r.at_ms, isinstance(r, CommandRecord), r.offset))
        shown = picked[-recent:] if recent else picked
        steps = [await self.command_step(r, link=key) if isinstance(r, CommandRecord) else
                 await self.event_step(r, link=key) for r in shown]
        return Decisions(steps=steps, earlier=len(picked) - len(shown))


def _event_reason(event: EventRecord) -> str:
    match event.event:
        case BindingAdmissionDecided(reason=reason) | PodGateDecided(reason=reason):
            return reason
        case DataLocationResolved(location=location, trigger=trigger):
            return f"the catalog answered {location} ({trigger})"
        case DataSourceNotInCatalog(message=message):
            return f"not in the catalog: {message}"
        case DataLocationLookupFailed(message=message, retryable=retryable):
            return f"the lookup failed{' (retried)' if retryable else ''}: {message}"
    return ""


def _observed_object(event: EventRecord) -> KubeObject | None:
    match event.event:
        case ObjectObserved(obj=obj) | ObjectDeleted(obj=obj):
            return obj
        case CommandSucceeded(result=obj) if obj is not None:
            return obj
    return None


async def _binding_link(reader: _Reader, key: str, world: World) -> BindingLink:
    latest: EventRecord | None = None
    obj: KubeObject | None = None
    for event in reversed(await reader.events(key)):
        obj = _observed_object(event)
        if obj is not None:
            latest = event
            break
    spec = obj.spec_dict() if obj is not None else {}
    annotations = obj.metadata.annotations if obj is not None else {}
    scheduled = tuple(sorted(str(c.get("name")) for c in as_list(spec.get("clusters"))
                             if isinstance(c, dict) and c.get("name")))
    view = world.bindings.get(key)
    excluded = view.added if view is not None else tuple(sorted(
        c for c in annotations.get(EXCLUDED_CLUSTERS_ANNOTATION, "").split(",") if c))
    deleted = latest is not None and isinstance(latest.event, ObjectDeleted)
    observed = await reader.event_step(latest, link=key) if latest is not None else None
    if dig(spec, "suspension", "scheduling") is True:
        hold = annotations.get(ADMISSION_ANNOTATION, "")
        admission_state = f"suspended (held: {hold})" if hold else "suspended"
        if EVICTED_FOR_ANNOTATION in annotations:
            admission_state += f"; evicted for {annotations[EVICTED_FOR_ANNOTATION]}"
    elif ADMITTED_REQUEST_ANNOTATION in annotations:
        admission_state = f"admitted ({annotations[ADMITTED_REQUEST_ANNOTATION]})"
        if dig(spec, "suspension", "dispatching") is True and OVERRUN_ANNOTATION in annotations:
            admission_state += f"; its growth waits, dispatching suspended: {annotations[OVERRUN_ANNOTATION]}"
    else:
        admission_state = "not suspended"
    status = obj.status_dict() if obj is not None else {}
    condition = next((c for c in as_list(status.get("conditions")) if isinstance(c, dict)
                      and c.get("type") == "Scheduled"), None)
    tier = tier_standing(as_mapping(spec.get("placement")), annotations,
                         str(status.get("schedulerObservingAffinityName") or ""), condition)
    return BindingLink(
        key=key, observed=observed, scheduled=scheduled, deleted=deleted, excluded=tuple(excluded), tier=tier,
        placement=await reader.decisions(key, (SetBindingPlacement, SetBindingTiers)),
        admission_state=admission_state,
        admission=await reader.decisions(key, (ResumeBinding, SetAdmissionHold, EvictBinding, SuspendDispatching,
                                               AdmitRequest), events=(BindingAdmissionDecided,), recent=2 * RECENT,
                                         chain=True))


async def _data_link(reader: _Reader, world: World, *, claim_key: str, source_name: str) -> DataLink:
    claim = world.claims.get(claim_key) if claim_key else None
    source = world.sources.get(source_name) if source_name else None
    identity = claim.identity if claim is not None else (source.identity if source is not None else None)
    if claim is not None:
        if claim.phase == "Bound":
            claim_state = f"Bound to DataSource {claim.bound_data_source}"
        else:
            bound = next((c for c in claim.conditions if c.type == "Bound"), None)
            claim_state = f"{claim.phase}" + (f": {bound.reason}: {bound.message}" if bound is not None else "")
        if claim.problem:
            claim_state += f" (invalid spec: {claim.problem})"
        if source is None:
            name = claim.bound_data_source or (data_source_name(identity) if identity is not None else "")
            source = world.sources.get(name) if name else None
    elif claim_key:
        claim_state = "not in the world (deleted, or not observed yet)"
    else:
        claim_state = ""
    source_key = f"DataSource//{source.ref.name}" if source is not None else ""
    if source is not None:
        source_state = (f"clusters {', '.join(source.cluster_names) or '-'}; location {source.location or '-'}"
                        + ("; being deleted" if source.deleting else ""))
        source_decisions = await reader.decisions(source_key, (CreateDataSource, UpdateDataSourceLocality))
    else:
        source_state, source_decisions = "no DataSource caches this data yet", Decisions()
    location, location_state, catalog = "", "the catalog has not answered", Decisions()
    prefix, mapping_state, mapping = "", "", Decisions()
    mapped: tuple[str, ...] = ()
    if identity is not None:
        lookup = world.lookups.get(identity.key)
        data_key = f"Data/{identity.key}"
        catalog = await reader.decisions(data_key, (), events=(DataLocationResolved, DataSourceNotInCatalog,
                                                                DataLocationLookupFailed), recent=2)
        if lookup is not None and lookup.kind == "resolved":
            location, location_state = lookup.location, f"the catalog's latest answer ({lookup.trigger})"
        elif lookup is not None:
            location_state = f"{lookup.kind}: {lookup.message}"
        if not location and source is not None:
            location, location_state = source.location, "the DataSource's location"
        in_flight = world.lookups_in_flight.get(identity.key)
        if in_flight is not None:
            location_state += f"; a lookup is in flight (attempt {in_flight})"
        plugin = world.plugins.plugins.get(identity.system)
        configmap = f"ConfigMap/{world.settings.plugin_configmap}"
        observed = [e for e in await reader.events(configmap) if isinstance(e.event, ObjectObserved)]
        if plugin is None:
            error = world.plugins.errors.get(identity.system)
            mapping_state = (f"plugin {identity.system!r} does not parse: {error}" if error else
                             f"no plugin for system {identity.system!r} in {configmap}")
        elif location:
            prefix, mapped = matching_prefix(plugin.location_mapping, location)
            mapping_state = (f"{prefix} → {', '.join(mapped) or '-'} (plugin {plugin.key} of {configmap})" if prefix
                             else f"no prefix of plugin {plugin.key}'s locationMapping matches {location}")
        if observed:
            mapping = Decisions(steps=[await reader.event_step(observed[-1], link=configmap, reason="")],
                                earlier=len(observed) - 1)
    return DataLink(
        claim=claim_key, claim_state=claim_state,
        claim_status=await reader.decisions(claim_key, (UpdateClaimStatus,), recent=1) if claim_key else Decisions(),
        identity=identity.key if identity is not None else "",
        source=source_key, source_state=source_state,
        source_clusters=source.cluster_names if source is not None else (), source_decisions=source_decisions,
        location=location, location_state=location_state, catalog=catalog,
        prefix=prefix, mapped=mapped, mapping_state=mapping_state, mapping=mapping)


def _pods_of(world: World, workload: str) -> list[tuple[str, MemberPod]]:
    """The member pods that belong to ``workload`` (module docstring: owned by its Job, or named after it)."""
    _, kind, namespace, name = [*workload.split("/", 3), "", "", ""][:4]
    out: list[tuple[str, MemberPod]] = []
    for cluster, state in sorted(world.members.clusters.items()):
        for key, pod in sorted(state.pods.items()):
            if pod.namespace != namespace:
                continue
            if (kind == "Job" and pod.job == name) or (kind == "PodGroup" and pod.group == name) or \
                    pod.name.startswith(f"{name}-"):
                out.append((f"{cluster}:{key}", pod))
    return out


async def _pod_link(reader: _Reader, key: str, pod: MemberPod) -> PodLink:
    cluster = key.partition(":")[0]
    keys = [key]
    uid = pod.annotations.get(POD_ADMISSION_ANNOTATION, "")
    if uid:
        keys.append(pod_admission_key(cluster, pod.namespace, "", uid))
    steps: list[Step] = []
    earlier = 0
    for k in keys:
        found = await reader.decisions(k, (ReleasePod,), events=(PodGateDecided,), recent=2)
        steps += found.steps
        earlier += found.earlier
    steps.sort(key=lambda s: s.at_ms)
    if pod.gates:
        state = f"gated ({', '.join(pod.gates)})"
    elif pod.node_name:
        state = f"on node {pod.node_name}"
    else:
        state = "not scheduled yet"
    return PodLink(key=key, state=state + (f", {pod.phase}" if pod.phase else ""),
                   decisions=Decisions(steps=steps, earlier=earlier))


async def _workload_chain(reader: _Reader, world: World, *, subject: str, workload: str) -> Chain:
    bindings = [await _binding_link(reader, key, world) for key in sorted(world.bindings_by_workload.get(workload, ()))]
    data = [await _data_link(reader, world, claim_key=key, source_name="")
            for key in sorted(world.claims_by_workload.get(workload, ()))]
    pods = _pods_of(world, workload)
    links = [await _pod_link(reader, key, pod) for key, pod in pods[:PODS_SHOWN]]
    return Chain(subject=subject, workload=workload, bindings=bindings, data=data, pods=links,
                 pods_not_shown=max(0, len(pods) - PODS_SHOWN))


async def chains(index: LogIndex, world: World, target: Target, *, bounds: Bounds) -> list[Chain]:
    """The chains behind ``target``: one per workload it names (a workload, or the workload of a binding or a
    claim), or a DataSource's own; none for any other kind of key."""
    reader = _Reader(index, bounds)
    key = target.key
    if target.cluster:
        return []
    if target.kind == "ResourceBinding":
        binding = world.bindings.get(key)
        workloads: Sequence[str] = [binding.workload] if binding is not None and binding.workload else []
    elif target.kind == "DataSourceClaim":
        claim = world.claims.get(key)
        workloads = [claim.workload] if claim is not None and claim.workload else []
    elif target.kind == "DataSource":
        source = world.sources.get(target.name)
        if source is None:
            return []
        link = await _data_link(reader, world, claim_key="", source_name=target.name)
        return [Chain(subject=key, workload="", bindings=[], data=[link], pods=[],
                      claims_of_source=list(source.claim_keys))]
    else:
        workloads = sorted(w for w in workloads_of(world) if target.matches_workload(w))
    return [await _workload_chain(reader, world, subject=workload_display(w), workload=w) for w in workloads]


__all__ = ["BindingLink", "Chain", "DataLink", "Decisions", "PodLink", "Step", "chains", "matching_prefix",
           "workloads_of"]
