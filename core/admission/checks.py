"""Admission checks: what a queue-managed binding must pass before its queue admits it — data readiness.

As Kueue gates a workload's admission on its AdmissionChecks, a queue of the admission ConfigMap may name checks
(key ``admission-checks``; docs/admission-checks.md)::

    queues:
      ml:
      - data-bound                # every claim of the workload is Bound
      - name: data-loaded         # a DataLoad of the claim's Fluid Dataset completed in a member cluster
        timeout: 30m              # an attempt Pending longer than this fails (default: no timeout)
        retryLimit: 3             # failures retried before the check is Rejected (default 3)
        backoff: 10s              # the wait after a failure, doubling (default 10s) …
        maxBackoff: 5m            # … up to this (default 5m)

A queue without checks behaves as before. A binding of a queue with checks is held until every check is
``Ready``; its queue's session then admits it as any other (``decider.cycle``). The checks:

* ``data-bound`` — every claim of the workload is Bound (the data's place is known). A claim resolving, or whose
  lookup fails transiently, keeps the check Pending; one that cannot resolve (not in the catalog, an unmapped
  location, an invalid claim, …) fails it.
* ``data-loaded`` — for each claim naming a Fluid Dataset (``spec.dataset``), a DataLoad of that Dataset is
  ``Complete`` in a member cluster among the workload's candidates (where its data placement allows it to run):
  Ready with those clusters, and **the workload is admitted onto those clusters only** (the data-dependency decider
  narrows the binding's placement to them: ``BindingPlacement.restriction``). A DataLoad running (or none yet)
  keeps it Pending; every DataLoad of the Dataset there ``Failed`` fails it. No claim naming a Dataset: Ready.

**States**, as Kueue's: ``Pending`` (an attempt is under way), ``Ready``, ``Retry`` (an attempt failed; the next
starts after the backoff), ``Rejected`` (failed past ``retryLimit``: the binding stays held, with the reason; the
check becomes Ready should its data become ready after all — a new DataLoad completing). A Pending attempt past its
timeout fails. Each binding's checks are written on it (``tether.dev/admission-checks``, JSON: state, reason,
attempt) with ``SetAdmissionChecks``, which the world notes when it is issued (so a replay and a restart decide the
same); the hold annotation names the checks it waits for; a check becoming Rejected is a Warning Event, and the
``Admitted`` Event of a binding that waited says which checks passed. Time is the events': a timeout or a backoff
ends on a ``TimerFired`` (:data:`~tether.core.world.admission_checks.CHECK_PURPOSE`).

Once a binding is admitted its checks no longer change (they are what it was admitted with).
"""

from __future__ import annotations

import json

from ..commands import (
    CheckStatus,
    EmitKubernetesEvent,
    SetAdmissionChecks,
    StartTimer,
    command_id,
    command_name,
    command_target,
)
from ..datadependency.decider import DecisionPass
from ..datadependency.tiers import Keep, TierPlan
from ..decision import Decision
from ..envelope import EventRecord, rfc3339
from ..events import TimerFired
from ..plugin_config import parse_duration
from ..world import Touched, World
from ..world.admission_checks import (
    CHECK_PURPOSE,
    CHECKS,
    DATA_BOUND,
    PENDING,
    READY,
    REJECTED,
    RETRY,
    CheckPolicy,
    ChecksConfig,
)
from ..world.admission_state import CYCLE_PURPOSE as CYCLE_PURPOSE_OF_ADMISSION
from ..world.admission_state import CYCLE_SUBJECT, AdmissionBinding, AdmissionState
from .config import AdmissionConfigError, load_yaml
from .data_hold import format_duration
from .model import DEFAULT_QUEUE
from .webhook_decision import RESOLVING_REASONS

DECIDER = "admission-checks"
#: The ConfigMap key of the checks.
CHECKS_KEY = "admission-checks"
_POLICY_KEYS = {"name", "timeout", "retryLimit", "backoff", "maxBackoff"}
_MAX_REASON = 300


# --- the configuration ------------------------------------------------------------------------------------------


def _duration_ms(value: object, where: str) -> int:
    try:
        seconds = parse_duration(value, field=where)
    except ValueError as error:
        raise AdmissionConfigError(f"{CHECKS_KEY}: {error}") from None
    if seconds < 0:
        raise AdmissionConfigError(f"{CHECKS_KEY}: {where}: must not be negative")
    return round(seconds * 1000)


def _policy(raw: object, where: str) -> CheckPolicy:
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        raise AdmissionConfigError(f"{CHECKS_KEY}: {where}: expected a check name or {{name, timeout, retryLimit, "
                                   f"backoff, maxBackoff}}")
    unknown = sorted(str(k) for k in raw if k not in _POLICY_KEYS)
    if unknown:
        raise AdmissionConfigError(f"{CHECKS_KEY}: {where}: unknown keys {unknown} (known: "
                                   f"{', '.join(sorted(_POLICY_KEYS))})")
    name = raw.get("name")
    if name not in CHECKS:
        raise AdmissionConfigError(f"{CHECKS_KEY}: {where}: unknown check {name!r} (known: {', '.join(CHECKS)})")
    limit = raw.get("retryLimit", 3)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise AdmissionConfigError(f"{CHECKS_KEY}: {where}.retryLimit: expected a non-negative integer, got "
                                   f"{limit!r}")
    backoff = _duration_ms(raw.get("backoff", "10s"), f"{where}.backoff")
    most = _duration_ms(raw.get("maxBackoff", "5m"), f"{where}.maxBackoff")
    if most < backoff:
        raise AdmissionConfigError(f"{CHECKS_KEY}: {where}.maxBackoff: shorter than its backoff")
    return CheckPolicy(name=str(name), timeout_ms=_duration_ms(raw.get("timeout", 0), f"{where}.timeout"),
                       retry_limit=limit, backoff_ms=backoff, max_backoff_ms=most)


def parse_checks(text: str) -> ChecksConfig:
    """The ``admission-checks`` key of the admission ConfigMap (module doc); raises :class:`AdmissionConfigError`
    naming the queue and the check at fault — the whole ConfigMap is then refused and the previous configuration
    stays in force."""
    document = load_yaml(text, what=f"{CHECKS_KEY}: ")
    if document is None:
        return ChecksConfig()
    if not isinstance(document, dict) or set(document) - {"queues"}:
        raise AdmissionConfigError(f"{CHECKS_KEY}: expected {{queues: {{<queue>: [<check>, ...]}}}}")
    queues = document.get("queues") or {}
    if not isinstance(queues, dict):
        raise AdmissionConfigError(f"{CHECKS_KEY}: queues: expected a mapping of queue name to its checks")
    out: dict[str, tuple[CheckPolicy, ...]] = {}
    for queue, raw in sorted(queues.items(), key=lambda item: str(item[0])):
        if not isinstance(queue, str) or not queue:
            raise AdmissionConfigError(f"{CHECKS_KEY}: a queue name must be a string, got {queue!r}")
        if not isinstance(raw, list):
            raise AdmissionConfigError(f"{CHECKS_KEY}: queue {queue}: expected a list of checks")
        policies = tuple(_policy(item, f"queue {queue}[{i}]") for i, item in enumerate(raw))
        names = [p.name for p in policies]
        if len(set(names)) != len(names):
            raise AdmissionConfigError(f"{CHECKS_KEY}: queue {queue}: a check is named twice")
        if policies:
            out[queue] = policies
    return ChecksConfig(queues=out)


# --- what a binding's checks say -------------------------------------------------------------------------------


def queue_of(state: AdmissionState, binding: AdmissionBinding) -> str:
    workload = state.workloads.get(binding.workload)
    return workload.queue if workload is not None else DEFAULT_QUEUE


def _brief(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


def checks_hold(state: AdmissionState, key: str, binding: AdmissionBinding) -> str:
    """Why a queue-managed binding is held by its queue's checks ("" when every check is Ready, or none)."""
    policies = state.checks_config.queues.get(queue_of(state, binding))
    if not policies:
        return ""
    current = {c.name: c for c in state.checks.get(key, ())}
    waiting = []
    for policy in policies:
        check = current.get(policy.name)
        if check is None:
            waiting.append(f"{policy.name} {PENDING}")
        elif check.state != READY:
            waiting.append(f"{policy.name} {check.state}: {check.reason}")
    return _brief("admission checks: " + "; ".join(waiting)) if waiting else ""


def checks_passed(state: AdmissionState, key: str, binding: AdmissionBinding) -> str:
    """What a binding admitted after its checks passed (its Admitted Event says it): "" when its queue has none."""
    policies = state.checks_config.queues.get(queue_of(state, binding))
    if not policies:
        return ""
    current = {c.name: c for c in state.checks.get(key, ())}
    return "admission checks passed: " + "; ".join(
        f"{p.name} ({current[p.name].reason})" if p.name in current else p.name for p in policies)


def annotation_text(checks: tuple[CheckStatus, ...]) -> str:
    """The ``tether.dev/admission-checks`` annotation of ``checks`` ("" : none — the annotation is removed)."""
    if not checks:
        return ""
    return json.dumps({c.name: {"state": c.state, "reason": c.reason, "attempt": c.attempt,
                                **({"clusters": list(c.clusters)} if c.clusters else {})} for c in checks},
                      sort_keys=True, separators=(",", ":"))


# --- deciding ---------------------------------------------------------------------------------------------------


class _Result:
    """An evaluation: ready (with clusters), pending or failed, and why."""

    __slots__ = ("clusters", "outcome", "reason")

    def __init__(self, outcome: str, reason: str, clusters: tuple[str, ...] = ()) -> None:
        self.outcome, self.reason, self.clusters = outcome, _brief(reason), clusters


def transition(policy: CheckPolicy, current: CheckStatus | None, result: _Result, now: int) -> CheckStatus:
    """The check's next state (module doc: states)."""
    def pending(attempt: int, since: int) -> CheckStatus:
        return CheckStatus(name=policy.name, state=PENDING, attempt=attempt, since_ms=since,
                           until_ms=since + policy.timeout_ms if policy.timeout_ms else 0, reason=result.reason)

    def ready(held: CheckStatus | None) -> CheckStatus:
        since = held.since_ms if held is not None and held.state == READY else now
        return CheckStatus(name=policy.name, state=READY, attempt=held.attempt if held is not None else 1,
                           since_ms=since, reason=result.reason, clusters=result.clusters)

    def failed(held: CheckStatus, why: str) -> CheckStatus:
        if held.attempt > policy.retry_limit:
            return CheckStatus(name=policy.name, state=REJECTED, attempt=held.attempt, since_ms=now,
                               reason=_brief(f"{why} (after {held.attempt} attempt{'s' * (held.attempt > 1)})"))
        return CheckStatus(name=policy.name, state=RETRY, attempt=held.attempt, since_ms=now,
                           until_ms=now + policy.backoff(held.attempt), reason=_brief(why))

    if result.outcome == "ready":
        return ready(current)
    if current is None:
        current = pending(1, now)
    if current.state == REJECTED:
        return current
    if current.state == RETRY:
        if now < current.until_ms:
            return current
        current = pending(current.attempt + 1, now)  # the backoff is over: the next attempt
    elif current.state == READY:
        current = pending(current.attempt, now)  # ready no more (the DataLoad was deleted): a new wait
    if result.outcome == "failed":
        return failed(current, result.reason)
    if current.until_ms and now >= current.until_ms:
        return failed(current, f"Pending for {format_duration(policy.timeout_ms)}, its timeout: {result.reason}")
    return CheckStatus(name=policy.name, state=PENDING, attempt=current.attempt, since_ms=current.since_ms,
                       until_ms=current.until_ms, reason=result.reason)


class _Pass:
    def __init__(self, world: World, record: EventRecord) -> None:
        self.world = world
        self.record = record
        self.data = DecisionPass(world, record)
        self.data.restrict = False  # the candidates of data-loaded: where the data placement allows it, unnarrowed
        self.out: list[Decision] = []

    def emit(self, command: SetAdmissionChecks | StartTimer | EmitKubernetesEvent, reason: str) -> None:
        world = self.world
        cid, target = command_id(command), command_target(command)
        at = f"{command_name(command)}:{target}"
        if (world.rejected and cid in world.rejected) or (world.retry_wait and at in world.retry_wait) or \
                world.inflight.get(at) == cid:
            return
        self.out.append(Decision(command=command, reason=reason, decider=DECIDER, id=cid, key=target, slot=at))

    # --- the checks ---

    def data_bound(self, binding: AdmissionBinding) -> _Result:
        world, data = self.world, self.data
        keys = sorted(world.claims_by_workload.get(binding.workload, ()))
        if not keys:
            return _Result("ready", "the workload has no claim")
        pending, failed = [], []
        for key in keys:
            claim = world.claims[key]
            if claim.deleting or data.source_for(key, claim) is not None:
                continue
            why = data.why_pending(claim)
            name = key.split("/", 1)[1]
            if why.reason in RESOLVING_REASONS or why.transient:
                pending.append(f"claim {name} is Pending ({why.reason})")
            else:
                failed.append(f"claim {name} cannot be bound: {why.reason}: {why.message}")
        if failed:
            return _Result("failed", "; ".join(failed))
        if pending:
            return _Result("pending", "; ".join(pending))
        return _Result("ready", f"{len(keys)} claim{'s' * (len(keys) > 1)} Bound")

    def candidates(self, key: str) -> set[str]:
        """Where the workload's data placement lets it run (every known cluster when nothing constrains it)."""
        world = self.world
        known = set(world.clusters) | set(world.members.clusters)
        view = world.bindings.get(key)
        desired = self.data.desired(view) if view is not None else None
        if desired is None or isinstance(desired, Keep):
            return known
        if isinstance(desired, TierPlan):
            return set(desired.allowed) if desired.allowed is not None else known
        return known - desired

    def data_loaded(self, key: str, binding: AdmissionBinding) -> _Result:
        world = self.world
        datasets = sorted({c.dataset for k in world.claims_by_workload.get(binding.workload, ())
                           if (c := world.claims[k]).dataset and not c.deleting})
        if not datasets:
            return _Result("ready", "no claim names a Fluid Dataset")
        candidates = self.candidates(key)
        ready: set[str] | None = None
        waiting, failed = [], []
        for dataset in datasets:
            loads = [(cluster, op) for cluster in sorted(candidates) if (state := world.members.clusters.get(cluster))
                     for _, op in sorted(state.operations.items()) if op.kind == "DataLoad" and op.operation is not None
                     and op.operation.dataset == dataset]
            done = {cluster for cluster, op in loads if op.operation is not None and op.operation.phase == "Complete"}
            ready = done if ready is None else ready & done
            if done:
                continue
            if loads and all(op.operation is not None and op.operation.phase == "Failed" for _, op in loads):
                failed.append(f"every DataLoad of Dataset {dataset} failed: " + ", ".join(
                    f"{op.namespace}/{op.name} in {cluster}" for cluster, op in loads))
            elif loads:
                waiting.append(f"Dataset {dataset} is loading: " + ", ".join(
                    f"DataLoad {op.namespace}/{op.name} in {cluster} is "
                    f"{(op.operation.phase if op.operation is not None else '') or 'Pending'}"
                    for cluster, op in loads))
            else:
                waiting.append(f"no DataLoad of Dataset {dataset} in the workload's clusters "
                               f"({', '.join(sorted(candidates)) or 'none'})")
        if ready:
            return _Result("ready", f"{', '.join(datasets)} loaded in {', '.join(sorted(ready))}", tuple(sorted(ready)))
        if failed:
            return _Result("failed", "; ".join(failed))
        if not waiting:
            waiting.append(f"{', '.join(datasets)} not loaded together in any one cluster of the workload's")
        return _Result("pending", "; ".join(waiting))

    def evaluate(self, name: str, key: str, binding: AdmissionBinding) -> _Result:
        return self.data_bound(binding) if name == DATA_BOUND else self.data_loaded(key, binding)

    # --- a binding ---

    def binding(self, key: str, binding: AdmissionBinding) -> None:
        state = self.world.admission
        now = self.record.at_ms
        policies = state.checks_config.queues.get(queue_of(state, binding), ())
        current = state.checks.get(key, ())
        if not policies:
            if current:
                self.emit(SetAdmissionChecks(binding=binding.ref, checks=()),
                          f"{key}: its queue names no admission check any more")
            return
        held = {c.name: c for c in current}
        new = tuple(transition(p, held.get(p.name), self.evaluate(p.name, key, binding), now) for p in policies)
        if new != current:
            self.emit(SetAdmissionChecks(binding=binding.ref, checks=new),
                      f"{key}: admission checks " + "; ".join(f"{c.name} {c.state}: {c.reason}" for c in new))
        if all(c.state == READY for c in new):
            self.admit_soon(key, binding)
        for check in new:
            if check.until_ms and check.state in (PENDING, RETRY):
                self.emit(StartTimer(timer_id=f"{CHECK_PURPOSE}|{key}|{check.name}|{check.attempt}|{check.until_ms}",
                                     fire_at_ms=check.until_ms, purpose=CHECK_PURPOSE, subject=key),
                          f"{key}: admission check {check.name} "
                          f"{'times out' if check.state == PENDING else 'is tried again'} at {rfc3339(check.until_ms)}")
            before = held.get(check.name)
            if check.state == REJECTED and (before is None or before.state != REJECTED):
                self.emit(EmitKubernetesEvent(involved=binding.ref, event_type="Warning",
                                              reason="AdmissionCheckRejected",
                                              message=f"admission check {check.name} rejected: {check.reason}"),
                          f"{key}: admission check {check.name} rejected")


    def admit_soon(self, key: str, binding: AdmissionBinding) -> None:
        """Every check passed and the placement they ask for is on the binding: its queue's next cycle need not
        wait for the timer armed a second after the last — one runs now (a cycle timer due now; the one armed
        before it then fires spent: ``projections.admission_fold``)."""
        state, now = self.world.admission, self.record.at_ms
        view = self.world.bindings.get(key)
        if not state.cycle_due or state.cycle_due <= now or view is None:
            return  # no cycle armed yet (the decider arms one), or one is due now
        self.data.restrict = True
        plan, desired = self.data.plan(key, view)
        self.data.restrict = False
        if desired is not None and (plan.changed or not view.injected):
            return  # the placement is being written: its outcome brings the binding back here
        self.emit(StartTimer(timer_id=f"{CYCLE_PURPOSE_OF_ADMISSION}|{now}", fire_at_ms=now,
                             purpose=CYCLE_PURPOSE_OF_ADMISSION, subject=CYCLE_SUBJECT),
                  f"{key}: its admission checks passed: the next admission cycle now")


def _everyone(touched: Touched, record: EventRecord) -> bool:
    """Whether the event may change the checks of bindings it did not touch (their data, their DataLoads)."""
    event = record.event
    return bool(touched.members or touched.identities or touched.sources or touched.all_bindings
                or touched.all_claims or touched.claims) or (isinstance(event, TimerFired)
                                                              and event.purpose != CHECK_PURPOSE)


def decide_checks(world: World, record: EventRecord, touched: Touched) -> list[Decision]:
    """The admission checks of the queue-managed bindings held (the world already folded the event): a binding's
    checks are decided again when the event touched it, its check's timer fired, or its data may have changed."""
    state = world.admission
    if not state.checks_config.queues and not state.checks:
        return []
    if _everyone(touched, record):
        keys = sorted(state.bindings)
    else:
        keys = sorted(k for k in touched.bindings if k in state.bindings)
    if not keys:
        return []
    decider = _Pass(world, record)
    for key in keys:
        binding = state.bindings[key]
        if not state.managed.manages(binding.workload_kind, binding.ref.namespace):
            continue
        if not binding.suspended or key in state.admitted:
            continue  # admitted: its checks are what it was admitted with
        decider.binding(key, binding)
    return decider.out


__all__ = ["CHECKS_KEY", "DECIDER", "annotation_text", "checks_hold", "checks_passed", "decide_checks",
           "parse_checks", "queue_of", "transition"]
