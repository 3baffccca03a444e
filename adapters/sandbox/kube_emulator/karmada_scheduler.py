"""A stand-in for karmada-scheduler (v1.18) that schedules ResourceBindings inside the emulator.

The sandbox has no Karmada control plane, yet tether's demo and integration tests need bindings to get scheduled
the way Karmada would. This task reacts to store events (no polling, no HTTP round trips) and reproduces the
externally visible behaviour the reference examples show:

* Only bindings labelled ``propagationpolicy.karmada.io/permanent-id``,
  ``clusterpropagationpolicy.karmada.io/permanent-id`` or ``binding.karmada.io/managed-by`` and with
  ``schedulerName`` empty or ``default-scheduler`` are considered; updates are queued only when
  ``metadata.generation`` changes (status writes are ignored), like the real event filter.
* ``spec.suspension.scheduling: true`` → skipped, nothing written at all.
* Scheduling happens when the placement differs from the ``policy.karmada.io/applied-placement`` annotation
  (always true the first time; for ``clusterAffinities`` only the group being observed is compared, as karmada's
  ``placementChanged``), when replicas changed (for Divided: the clusters' replicas do not add up to
  ``spec.replicas`` — none at all once ``spec.clusters`` was cleared), when ``rescheduleTriggeredAt`` is later than
  ``status.lastScheduledTime``, and always for a Duplicated binding (the default without ``replicaScheduling``) or
  one that is not a workload (no replicas, replica requirements or components), as Karmada's ``doScheduleBinding``
  does; otherwise only ``schedulerObservedGeneration`` is refreshed. A result equal to what the binding has is not
  written again (Karmada's merge patch is empty), only the status. Failed bindings are
  retried every ``retry_interval`` seconds and whenever a Cluster changes (the real scheduler's backoff queue).
* Filtering: Ready clusters; API enablement (a cluster whose ``status.apiEnablements`` does not list the
  binding's ``resource`` apiVersion and kind is filtered out with "cluster(s) did not have the API resource",
  unless it is already in ``spec.clusters`` — as Karmada's APIEnablement plugin); ``clusterAffinity``
  (``clusterNames``, ``exclude``, ``labelSelector``, ``fieldSelector`` on provider/region/zone) or
  ``clusterAffinities[]`` (ordered groups: tried from the one ``status.schedulerObservingAffinityName`` names — the
  first when it names none of them — onwards, the next only when one cannot hold the binding; the group used is
  recorded there; when none can, the name stays as it was and, for a filter failure (``NoClusterFit``),
  ``spec.clusters`` is cleared, as in karmada's ``scheduleResourceBindingWithClusterAffinities``);
  ``NoSchedule``/``NoExecute`` taints vs ``clusterTolerations``.
* Assignment: Duplicated (default) → every fitting cluster gets all replicas. Divided without a
  ``replicaDivisionPreference`` is a ``SchedulerError`` ("unsupported replica scheduling strategy"), as in Karmada
  (the CRD defaults the type to Divided but not the preference). Divided/Weighted → static weights
  (``staticWeightList``, equal if none) or dynamic weights by available replicas; Divided/Aggregated → fewest
  clusters by available replicas. Available replicas = min over requested resources of
  (allocatable - allocated - allocating) / request, and the pods headroom. Largest-remainder rounding.
  Approximations: no spreadConstraints, no incremental scale-up/down against the previous result; a cluster that
  fails several filters is counted under the first of API enablement, affinity, taints.
* Writes, like the real one: ``spec.clusters`` and the applied-placement annotation (one spec write), then status
  ``conditions[Scheduled]`` (``Success`` / ``NoClusterFit`` with ``0/N clusters are available: ...`` /
  ``Unschedulable`` / ``SchedulerError``), ``schedulerObservedGeneration`` and ``lastScheduledTime``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import math
import re
from typing import Any

from tether.core.keys import (
    APPLIED_PLACEMENT_ANNOTATION,
    BINDING_MANAGED_BY_LABEL,
    CLUSTER_PERMANENT_ID_LABEL,
    PERMANENT_ID_LABEL,
)

from . import errors
from .selectors import match_label_selector_object
from .store import Store, now_rfc3339
from .watch import Event

log = logging.getLogger(__name__)

RB = ("work.karmada.io", "resourcebindings")
CRB = ("work.karmada.io", "clusterresourcebindings")
CLUSTERS = ("cluster.karmada.io", "clusters")
#: The labels that make a binding Karmada's (the scheduler passes over others).
LABELS = (PERMANENT_ID_LABEL, CLUSTER_PERMANENT_ID_LABEL, BINDING_MANAGED_BY_LABEL)
AFFINITY_REASON = "cluster(s) did not match the placement cluster affinity constraint"
TAINT_REASON = "cluster(s) had untolerated taint"
API_REASON = "cluster(s) did not have the API resource"
_SUFFIX = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QTY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def parse_quantity(q: Any) -> float:
    if isinstance(q, int | float):
        return float(q)
    m = _QTY.match(str(q).strip())
    if not m:
        raise ValueError(f"invalid quantity {q!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2) or ""]


def _time(s: str | None) -> datetime.datetime | None:
    if not s:
        return None
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))


class SchedulingFailure(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def cluster_ready(cluster: dict[str, Any]) -> bool:
    conds = (cluster.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def api_enabled(cluster: dict[str, Any], api_version: str, kind: str) -> bool:
    """Whether the Cluster's ``status.apiEnablements`` lists ``kind`` in ``api_version`` (Karmada's IsAPIEnabled)."""
    for enablement in (cluster.get("status") or {}).get("apiEnablements") or []:
        if enablement.get("groupVersion") == api_version:
            return any(r.get("kind") == kind for r in enablement.get("resources") or [])
    return False


def affinity_matches(term: dict[str, Any], cluster: dict[str, Any]) -> bool:
    name = cluster["metadata"]["name"]
    if name in (term.get("exclude") or []):
        return False
    names = term.get("clusterNames") or []
    if names and name not in names:
        return False
    if not match_label_selector_object(term.get("labelSelector"), cluster["metadata"].get("labels") or {}):
        return False
    spec = cluster.get("spec") or {}
    for expr in (term.get("fieldSelector") or {}).get("matchExpressions") or []:
        value = spec.get(expr.get("key"))
        values = expr.get("values") or []
        if expr.get("operator") == "In" and value not in values:
            return False
        if expr.get("operator") == "NotIn" and value in values:
            return False
    return True


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def available_replicas(cluster: dict[str, Any], request: dict[str, Any]) -> int:
    summary = (cluster.get("status") or {}).get("resourceSummary") or {}
    alloc = summary.get("allocatable") or {}
    if not alloc:
        return 0

    def free(r: str) -> float:
        used = sum(parse_quantity(((summary.get(k) or {}).get(r)) or 0) for k in ("allocated", "allocating"))
        return parse_quantity(alloc.get(r, 0)) - used

    limits = [max(0, int(free("pods")))] if "pods" in alloc else []
    for r, q in (request or {}).items():
        need = parse_quantity(q)
        if need > 0:
            limits.append(max(0, math.floor(free(r) / need + 1e-9)))
    return min(limits) if limits else 2**31 - 1


def divide(replicas: int, weights: dict[str, float]) -> dict[str, int]:
    """Largest-remainder split of ``replicas`` by weight; ties go to the larger weight, then the name."""
    total = sum(weights.values())
    if total <= 0:
        return {}
    exact = {n: replicas * w / total for n, w in weights.items()}
    out = {n: math.floor(v) for n, v in exact.items()}
    left = replicas - sum(out.values())
    for n in sorted(exact, key=lambda n: (-(exact[n] - out[n]), -weights[n], n))[:left]:
        out[n] += 1
    return {n: r for n, r in out.items() if r > 0}


def assign(spec: dict[str, Any], clusters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    replicas = int(spec.get("replicas") or 0)
    rs = (spec.get("placement") or {}).get("replicaScheduling") or {}
    names = sorted(c["metadata"]["name"] for c in clusters)
    if rs.get("replicaSchedulingType", "Duplicated") == "Duplicated" or replicas == 0:
        return [{"name": n, "replicas": replicas} if replicas else {"name": n} for n in names]
    request = (spec.get("replicaRequirements") or {}).get("resourceRequest") or {}
    avail = {c["metadata"]["name"]: available_replicas(c, request) for c in clusters}
    pref = rs.get("replicaDivisionPreference", "")
    wp = rs.get("weightPreference") or {}
    if pref not in ("Aggregated", "Weighted"):
        raise SchedulingFailure("SchedulerError", f"unsupported replica scheduling strategy, replicaSchedulingType: "
                                f"Divided, replicaDivisionPreference: {pref}, please try another scheduling strategy")

    def enough(candidates: dict[str, int]) -> None:
        if sum(candidates.values()) < replicas:  # (karmada's dynamicScaleUp, on a binding's first scheduling)
            raise SchedulingFailure("Unschedulable", f"failed to assign replicas: failed to scale up: Clusters "
                                    f"available replicas {sum(candidates.values())} are not enough to schedule.")

    if pref == "Aggregated":
        enough(avail)
        chosen: dict[str, int] = {}
        for n in sorted(avail, key=lambda n: (-avail[n], n)):
            chosen[n] = avail[n]
            if sum(chosen.values()) >= replicas:
                break
        result = divide(replicas, {n: float(a) for n, a in chosen.items()})
    elif wp.get("dynamicWeight") == "AvailableReplicas":
        enough(avail)
        result = divide(replicas, {n: float(a) for n, a in avail.items() if a > 0})
    else:
        weights = {n: 0.0 for n in names}
        static = wp.get("staticWeightList") or []
        for entry in static:
            for n in names:
                target = {"clusterNames": (entry.get("targetCluster") or {}).get("clusterNames"),
                          "exclude": (entry.get("targetCluster") or {}).get("exclude"),
                          "labelSelector": (entry.get("targetCluster") or {}).get("labelSelector")}
                cluster = next(c for c in clusters if c["metadata"]["name"] == n)
                if affinity_matches(target, cluster):
                    weights[n] = max(weights[n], float(entry.get("weight") or 0))
        if not static:
            weights = {n: 1.0 for n in names}
        result = divide(replicas, weights)
    return [{"name": n, "replicas": result[n]} for n in sorted(result)]


class KarmadaScheduler:
    def __init__(self, store: Store, *, scheduler_name: str = "default-scheduler", retry_interval: float = 1.0):
        self.store = store
        self.scheduler_name = scheduler_name
        self.retry_interval = retry_interval
        self._queue: asyncio.Queue[tuple[tuple[str, str], str, str]] = asyncio.Queue()
        self._queued: set[tuple[tuple[str, str], str, str]] = set()
        self._failed: set[tuple[tuple[str, str], str, str]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.scheduled = 0  # successful scheduling rounds (observability for the demo)

    def start(self) -> None:
        self.store.listeners.append(self._on_event)
        for key in (RB, CRB):
            for obj in self.store.iter_objects(key):
                self._enqueue((key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]))
        self._tasks = [asyncio.create_task(self._worker(), name="karmada-scheduler"),
                       asyncio.create_task(self._retry(), name="karmada-scheduler-retry")]

    async def stop(self) -> None:
        if self._on_event in self.store.listeners:
            self.store.listeners.remove(self._on_event)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    def _enqueue(self, item: tuple[tuple[str, str], str, str]) -> None:
        if item not in self._queued:
            self._queued.add(item)
            self._queue.put_nowait(item)

    def _on_event(self, ev: Event) -> None:
        if ev.key in (RB, CRB):
            item = (ev.key, ev.namespace, ev.obj["metadata"]["name"])
            if ev.type == "DELETED":
                self._failed.discard(item)
            elif ev.type == "ADDED" or (ev.prev or {}).get("metadata", {}).get("generation") != \
                    ev.obj["metadata"].get("generation"):
                self._enqueue(item)
        elif ev.key == CLUSTERS:
            for item in list(self._failed):
                self._enqueue(item)

    async def _retry(self) -> None:
        while True:
            await asyncio.sleep(self.retry_interval)
            for item in list(self._failed):
                self._enqueue(item)

    async def _worker(self) -> None:
        while True:
            item = await self._queue.get()
            self._queued.discard(item)
            try:
                await self._schedule(*item)
            except errors.ApiError as e:
                if e.code != 404:
                    self._failed.add(item)
            except Exception:
                log.exception("karmada scheduler stand-in failed on %s", item)

    async def _schedule(self, key: tuple[str, str], namespace: str, name: str) -> None:
        rb = self.store.get_obj(key, namespace, name)
        if rb is None or key not in self.store.types:
            self._failed.discard((key, namespace, name))
            return
        meta, spec, status = rb["metadata"], rb.get("spec") or {}, rb.get("status") or {}
        labels = meta.get("labels") or {}
        if not any(k in labels for k in LABELS) or meta.get("deletionTimestamp"):
            return
        if spec.get("schedulerName", "") not in ("", "default-scheduler", self.scheduler_name):
            return
        if (spec.get("suspension") or {}).get("scheduling"):
            return
        item = (key, namespace, name)
        placement = spec.get("placement")
        applied = (meta.get("annotations") or {}).get(APPLIED_PLACEMENT_ANNOTATION)
        try:
            applied_placement = json.loads(applied) if applied else None
        except ValueError:
            applied_placement = None
        last = _time(status.get("lastScheduledTime"))
        triggered = _time(spec.get("rescheduleTriggeredAt"))
        observing = status.get("schedulerObservingAffinityName") or ""
        needed = (
            placement_changed(placement, applied, applied_placement, observing)
            or self._replicas_changed(spec)
            or (triggered is not None and (last is None or triggered > last))
            or item in self._failed
            or not self._workload(spec)  # (Karmada's rule: these are always scheduled)
            or self._scheduling_type(spec) != "Divided"
        )
        if not needed:
            await self._write_status(key, namespace, name, observed=True)
            return
        rt = self.store.type_for(*key)
        annotation = json.dumps(placement, separators=(",", ":"))

        def apply_spec(obj: dict[str, Any]) -> dict[str, Any]:
            if clusters_result:
                obj.setdefault("spec", {})["clusters"] = clusters_result
            else:
                obj.setdefault("spec", {}).pop("clusters", None)
            obj["metadata"].setdefault("annotations", {})[APPLIED_PLACEMENT_ANNOTATION] = annotation
            return obj

        try:
            if placement is None:
                raise SchedulingFailure("SchedulerError", "failed to get placement")
            clusters_result, affinity_name = self._decide(spec, placement, observing)
        except SchedulingFailure as f:
            self._failed.add(item)
            if f.reason == "NoClusterFit" and placement and placement.get("clusterAffinities"):
                clusters_result = []  # every group failed its filters: the result is cleared (karmada's own)
                await self.store.patch(rt, name, apply_spec, namespace=namespace)
            await self._write_status(key, namespace, name, condition=("False", f.reason, f.message), observed=False)
            return

        if (spec.get("clusters") or []) != clusters_result or applied != annotation:  # (an empty merge patch: no write)
            await self.store.patch(rt, name, apply_spec, namespace=namespace)
        self._failed.discard(item)
        self.scheduled += 1
        await self._write_status(key, namespace, name, condition=(
            "True", "Success", "Binding has been scheduled successfully."), scheduled=True,
            affinity_name=affinity_name)

    @staticmethod
    def _workload(spec: dict[str, Any]) -> bool:
        """Karmada's ``ResourceBindingSpec.IsWorkload``: replicas, replica requirements or components."""
        return bool(int(spec.get("replicas") or 0) > 0 or spec.get("replicaRequirements") is not None
                    or spec.get("components"))

    @staticmethod
    def _scheduling_type(spec: dict[str, Any]) -> str:
        """Karmada's ``Placement.ReplicaSchedulingType()``: Duplicated without ``replicaScheduling``."""
        scheduling = (spec.get("placement") or {}).get("replicaScheduling")
        if not isinstance(scheduling, dict):
            return "Duplicated"
        return str(scheduling.get("replicaSchedulingType") or "Divided")  # (the CRD's default)

    @classmethod
    def _replicas_changed(cls, spec: dict[str, Any]) -> bool:
        """Karmada's ``IsBindingReplicasChanged`` (no strategy: unchanged)."""
        if not isinstance((spec.get("placement") or {}).get("replicaScheduling"), dict):
            return False
        clusters = spec.get("clusters") or []
        replicas = int(spec.get("replicas") or 0)
        if cls._scheduling_type(spec) == "Divided":
            return sum(int(c.get("replicas") or 0) for c in clusters) != replicas
        return any(int(c.get("replicas") or 0) != replicas for c in clusters)

    def _decide(self, spec: dict[str, Any], placement: dict[str, Any],
                observing: str = "") -> tuple[list[dict[str, Any]], str | None]:
        ready = [c for c in self.store.iter_objects(CLUSTERS) if cluster_ready(c)]
        if not ready:
            raise SchedulingFailure("SchedulerError", "no clusters available to schedule")
        terms = placement.get("clusterAffinities")
        # karmada's getAffinityIndex: from the group last used onwards (the first when none of them is named so)
        start = next((i for i, t in enumerate(terms) if observing and t.get("affinityName") == observing), 0) \
            if terms else 0
        candidates = [(t.get("affinityName"), t) for t in terms[start:]] if terms else \
            [(None, placement.get("clusterAffinity") or {})]
        first: SchedulingFailure | None = None
        tolerations = placement.get("clusterTolerations") or []
        resource = spec.get("resource") or {}
        targets = {c.get("name") for c in spec.get("clusters") or []}
        failure: SchedulingFailure | None = None
        for affinity_name, term in candidates:
            reasons: dict[str, int] = {}
            fit = []
            for c in sorted(ready, key=lambda c: c["metadata"]["name"]):
                if c["metadata"]["name"] not in targets and not api_enabled(
                        c, resource.get("apiVersion", ""), resource.get("kind", "")):
                    reasons[API_REASON] = reasons.get(API_REASON, 0) + 1
                    continue
                if not affinity_matches(term, c):
                    reasons[AFFINITY_REASON] = reasons.get(AFFINITY_REASON, 0) + 1
                    continue
                bad = [t for t in (c.get("spec") or {}).get("taints") or []
                       if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(t, tolerations)]
                if bad:
                    why = f"{TAINT_REASON} {{{bad[0].get('key')}: {bad[0].get('value', '')}}}"
                    reasons[why] = reasons.get(why, 0) + 1
                    continue
                fit.append(c)
            if not fit:
                hist = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
                failure = SchedulingFailure("NoClusterFit", f"0/{len(ready)} clusters are available: {hist}.")
                first = first or failure
                continue
            try:
                return assign(spec, fit), affinity_name
            except SchedulingFailure as f:
                failure = f
                first = first or failure
        assert failure is not None and first is not None  # at least one term was tried
        raise first  # (karmada reports the first group's failure)

    async def _write_status(
        self, key: tuple[str, str], namespace: str, name: str, *, condition: tuple[str, str, str] | None = None,
        scheduled: bool = False, observed: bool = True, affinity_name: str | None = None,
    ) -> None:
        rt = self.store.type_for(*key)

        def apply(obj: dict[str, Any]) -> dict[str, Any]:
            status = obj.setdefault("status", {})
            if observed:
                status["schedulerObservedGeneration"] = obj["metadata"].get("generation")
            if scheduled:
                status["lastScheduledTime"] = now_rfc3339()
            if affinity_name:
                status["schedulerObservingAffinityName"] = affinity_name
            if condition is not None:
                conds = status.get("conditions") or []
                old = next((c for c in conds if c.get("type") == "Scheduled"), None)
                st, reason, message = condition
                stamp = old["lastTransitionTime"] if old and old.get("status") == st else now_rfc3339()
                new = {"type": "Scheduled", "status": st, "reason": reason, "message": message,
                       "lastTransitionTime": stamp}
                status["conditions"] = [c for c in conds if c.get("type") != "Scheduled"] + [new]
            return obj

        await self.store.patch(rt, name, apply, namespace=namespace, subresource="status")


def placement_changed(placement: dict[str, Any] | None, applied: str | None,
                      applied_placement: dict[str, Any] | None, observing: str) -> bool:
    """karmada's ``placementChanged``: no applied placement, or one that differs — and for ``clusterAffinities``, a
    difference outside them, or in the group being observed (a change of another group alone schedules nothing)."""
    if not applied or not isinstance(applied_placement, dict) or placement is None:
        return True
    if applied_placement == placement:
        return False
    rest = ("clusterAffinity", "clusterTolerations", "spreadConstraints", "replicaScheduling")
    if any(placement.get(k) != applied_placement.get(k) for k in rest):
        return True
    if not observing:
        return True

    def term(of: dict[str, Any]) -> dict[str, Any] | None:
        return next((t for t in of.get("clusterAffinities") or [] if t.get("affinityName") == observing), None)

    now, then = term(placement), term(applied_placement)
    return now is None or then is None or now != then


def detector_rewrite(rb: dict[str, Any], placement: dict[str, Any]) -> list[dict[str, Any]]:
    """What Karmada's resource detector does to a binding on every policy apply, as a JSON Patch for tests:
    ``spec.placement`` replaced whole by the policy's (an external controller's edits, tether's exclusions among
    them, are gone), ``clusters``, ``rescheduleTriggeredAt``, ``suspension`` and the annotations kept; guarded by
    the resourceVersion read (a JSON merge patch would merge into the old placement, which the detector does not)."""
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": rb["metadata"]["resourceVersion"]},
            {"op": "replace" if "placement" in (rb.get("spec") or {}) else "add", "path": "/spec/placement",
             "value": placement}]
