"""An in-memory Kubernetes + catalog that applies tether's commands synchronously: for tests and benchmarks.

The decider's scenario tests, the property tests and the replay benchmark need a world that answers commands
the way the real adapters do, thousands of times per second and deterministically. :class:`FakeCluster` is that
world: a dictionary of raw objects with a resourceVersion counter, finalizer/deletion semantics and the same
placement arithmetic as the Kubernetes executor (``core.datadependency.tiers.plan_command``); a
dictionary of table locations stands in for the catalog. It is not an API server — the emulator
(``adapters/kube_emulator``) is, and the integration tests run the real adapters against it. This one only has to
agree with the executors on *what* each command does, which ``tests/integration`` checks for the real pair.

Member clusters' objects (pods, nodes, PodGroups) may be kept too, under their member keys (``put(raw,
cluster=...)``): a ``ReleasePod`` on a pod the fake holds is applied as the member executor does (tether's terms
merged into the pod's affinity, the gate removed, one write), an ``EmitMemberEvent`` about an object it holds is
recorded. A member command about an object it does not hold is answered as done, changing nothing — the decider
tests that feed member events by hand keep that answer.

:class:`Harness` drives the loop: user actions become observation events, each event goes through
``projections.step.step``, each command is applied to the fake cluster, each outcome becomes an event again,
until nothing is left to do. Time advances one millisecond per event; timers fire when :meth:`Harness.advance`
moves the clock past them.
"""

from __future__ import annotations

import copy
import json
from collections import deque
from typing import Any

from tether.adapters.kubernetes.executor import reschedule_needed
from tether.adapters.kubernetes.manifests import data_source_manifest
from tether.core import api
from tether.core.admission.checks import annotation_text
from tether.core.commands import (
    AddFinalizer,
    AdmitRequest,
    Command,
    CreateDataSource,
    CreateQueue,
    DeleteDataSource,
    EmitKubernetesEvent,
    EmitMemberEvent,
    EvictBinding,
    LookupDataLocation,
    ReleasePod,
    RemoveFinalizer,
    ResumeBinding,
    SetAdmissionChecks,
    SetAdmissionHold,
    SetBindingPlacement,
    SetBindingTiers,
    StartTimer,
    SuspendDispatching,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    UpdateQueueStatus,
    command_name,
    command_target,
)
from tether.core.datadependency.tiers import plan_command
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    Event,
    ObjectDeleted,
    ObjectObserved,
    TimerFired,
    event_key,
    member_key,
)
from tether.core.identity import DataIdentity
from tether.core.keys import (
    ADMISSION_ANNOTATION,
    ADMISSION_CHECKS_ANNOTATION,
    ADMITTED_REQUEST_ANNOTATION,
    EVICTED_FOR_ANNOTATION,
    LOCATION_ANNOTATION,
    OVERRUN_ANNOTATION,
    PLACEMENT_ANNOTATION,
)
from tether.core.kube import KubeObject, ObjectKey, as_json, object_key, trim
from tether.core.placement.node_affinity import InvalidAffinity, tighten_node_affinity
from tether.core.world import World, initial_world
from tether.projections.step import step

_STATUS_KINDS = {"DataSourceClaim", "DataSource", "ResourceBinding", "Queue"}
#: The wire names of the fields tether's commands write on its kinds (``core.api``, their one description).
_CLAIM_STATUS = api.field_names(api.DataSourceClaimStatus)
_SOURCE_SPEC = api.field_names(api.DataSourceSpec)
_SOURCE_STATUS = api.field_names(api.DataSourceStatus)
_LOCALITY = api.field_names(api.Locality)


class FakeCluster:
    """Raw objects by key, with resourceVersion, generation, finalizers and a catalog of table locations."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.catalog: dict[str, str] = {}  # identity key → location
        self.catalog_failures: dict[str, str] = {}  # identity key → transient failure message (while set)
        self.catalog_refusals: dict[str, str] = {}  # identity key → permanent failure message (401, …; while set)
        self.lookups: list[str] = []  # identity keys looked up, in order
        self.kube_events: list[EmitKubernetesEvent] = []
        self.member_events: list[EmitMemberEvent] = []
        self.timers: dict[str, StartTimer] = {}
        self.resumed: list[str] = []  # bindings a ResumeBinding unsuspended, in order
        self.evicted: list[str] = []  # bindings an EvictBinding suspended again, in order
        self.resume_failures = 0  # the next n ResumeBindings that reach the API fail (retryable)

    # --- objects ------------------------------------------------------------------------------------------

    def _bump(self, obj: dict[str, Any]) -> KubeObject:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return trim(obj)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.objects.get(key)

    def put(self, raw: dict[str, Any], *, cluster: str = "") -> KubeObject:
        """Create or replace an object as a user would (spec changes bump generation; status is kept).
        ``cluster``: a member cluster's object (a Pod, Node, PodGroup), kept under its member key
        (``core.events.member_key``) — the key the member commands target."""
        raw = copy.deepcopy(raw)
        meta = raw.setdefault("metadata", {})
        key = member_key(cluster, object_key(raw["kind"], meta.get("namespace", ""), meta["name"]))
        old = self.objects.get(key)
        if old is None:
            meta.setdefault("uid", f"uid-{self.rv + 1}")
            meta["generation"] = 1
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        else:
            meta["uid"] = old["metadata"]["uid"]
            meta["generation"] = old["metadata"].get("generation", 1) + (old.get("spec") != raw.get("spec"))
            meta.setdefault("finalizers", old["metadata"].get("finalizers", []))
            if old["metadata"].get("deletionTimestamp"):
                meta["deletionTimestamp"] = old["metadata"]["deletionTimestamp"]
            if raw["kind"] in _STATUS_KINDS:
                raw["status"] = copy.deepcopy(old.get("status", {}))
        self.objects[key] = raw
        return self._bump(raw)

    def delete(self, key: str) -> tuple[KubeObject, bool]:
        """Delete like the API server: with finalizers only mark it. Returns (object, gone)."""
        raw = self.objects[key]
        if raw["metadata"].get("finalizers"):
            if not raw["metadata"].get("deletionTimestamp"):
                raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                return self._bump(raw), False
            return trim(raw), False
        del self.objects[key]
        return self._bump(raw), True

    # --- commands -----------------------------------------------------------------------------------------

    def apply(self, record: CommandRecord) -> list[tuple[str, Event]]:
        """Apply one command; returns (source, event) pairs: the outcome, plus watch echoes of what changed."""
        command = record.command
        name = command_name(command)
        target = command_target(command)

        def ok(obj: KubeObject | None, *, noop: bool = False) -> list[tuple[str, Event]]:
            return [("executor", CommandSucceeded(command_id=record.id, command=name, target=target, result=obj,
                                                  noop=noop))]

        def fail(reason: str, message: str, *, retryable: bool = False) -> list[tuple[str, Event]]:
            return [("executor", CommandFailed(command_id=record.id, command=name, target=target, reason=reason,
                                               message=message, retryable=retryable))]

        match command:
            case LookupDataLocation(identity=identity):
                return [("catalog", self.lookup(identity))]
            case StartTimer():
                self.timers[command.timer_id] = command
                return ok(None)
            case EmitKubernetesEvent():
                self.kube_events.append(command)
                return ok(None)
            case CreateQueue():
                key = object_key("Queue", "", command.name)
                if key in self.objects:
                    return ok(None, noop=True)  # already there: the watch has it (as the executor answers)
                queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                         "metadata": {"name": command.name, "uid": f"uid-{self.rv + 1}", "generation": 1},
                         "spec": {"weight": command.weight, "reclaimable": True}}
                self.objects[key] = queue
                return ok(self._bump(queue))
            case CreateDataSource():
                key = object_key("DataSource", "", command.name)
                if key in self.objects:
                    spec = self.objects[key]["spec"]
                    same = (spec.get("system"), spec.get("type"), spec.get("name"), spec.get("attributes") or {}) == (
                        command.identity.system, command.identity.type, command.identity.name,
                        dict(command.identity.attributes))
                    # another data source holds the name: the API's 409, which production retries (it may go)
                    return ok(trim(self.objects[key]), noop=True) if same else fail(
                        "AlreadyExists", f"DataSource {command.name} exists for another data source", retryable=True)
                raw = data_source_manifest(command)
                raw["metadata"]["uid"] = f"uid-{self.rv + 1}"
                raw["metadata"]["generation"] = 1
                self.objects[key] = raw
                return ok(self._bump(raw))
        raw = self.objects.get(target)
        uid = _expected_uid(command)
        if raw is not None and uid and raw["metadata"].get("uid") != uid:
            raw = None  # same name, another object: the command was about one that is gone (the executor's read)
        if raw is None:
            if isinstance(command, AddFinalizer | UpdateDataSourceLocality):
                return fail("NotFound", f"{target} not found")
            return ok(None, noop=True)  # nothing to update, release or delete: done (as the executor answers)
        meta = raw["metadata"]
        match command:
            case AddFinalizer(finalizer=f):
                if f in meta.get("finalizers", []):
                    return ok(trim(raw), noop=True)
                if meta.get("deletionTimestamp"):
                    return fail("Invalid", "no new finalizers can be added if the object is being deleted")
                meta.setdefault("finalizers", []).append(f)
                return ok(self._bump(raw))
            case RemoveFinalizer(finalizer=f):
                if f not in meta.get("finalizers", []):
                    return ok(trim(raw), noop=True)
                if meta.get("deletionTimestamp") and meta["finalizers"] == [f]:
                    # the last finalizer of a deleting object: the API deletes it (answering its last stored state,
                    # finalizer included); the executor reports it gone, the watch a single DELETED
                    obj = self._bump(raw)
                    del self.objects[target]
                    return [*ok(None), ("watch", ObjectDeleted(obj=obj))]
                meta["finalizers"].remove(f)
                return ok(self._bump(raw))
            case UpdateClaimStatus():
                status = {_CLAIM_STATUS["phase"]: command.phase,
                          _CLAIM_STATUS["conditions"]: as_json(command.conditions)}
                if command.bound_data_source:
                    status[_CLAIM_STATUS["bound_data_source"]] = command.bound_data_source
                return self._set_status(raw, status, ok)
            case UpdateDataSourceStatus():
                status = dict(raw.get("status", {}))
                status[_SOURCE_STATUS["claim_refs"]] = as_json(command.claim_refs)
                status[_SOURCE_STATUS["bound_claims"]] = command.bound_claims
                return self._set_status(raw, status, ok)
            case UpdateDataSourceLocality():
                spec = raw["spec"]
                locality, names = _SOURCE_SPEC["locality"], _LOCALITY["cluster_names"]
                if spec.get(locality, {}).get(names) == list(command.cluster_names) and meta.get(
                        "annotations", {}).get(LOCATION_ANNOTATION) == command.location:
                    return ok(trim(raw), noop=True)
                spec[locality] = {names: list(command.cluster_names)}
                meta.setdefault("annotations", {})[LOCATION_ANNOTATION] = command.location
                meta["generation"] = meta.get("generation", 1) + 1
                return ok(self._bump(raw))
            case DeleteDataSource(uid=uid):
                if meta.get("uid") != uid:  # the API's 409 Conflict, retried by the executor and then the decider
                    return fail("Conflict", f"uid precondition failed for {target}", retryable=True)
                obj, gone = self.delete(target)
                return [*ok(None if gone else obj), *([("watch", ObjectDeleted(obj=obj))] if gone else [])]
            case SetBindingPlacement() | SetBindingTiers():
                spec = raw.setdefault("spec", {})
                plan, excluded, injected = plan_command(command, spec=spec, annotations=meta.get("annotations", {}))
                # (the executor's own rule: a trigger only while it has a job to do — KubeExecutor's)
                reschedule = injected and reschedule_needed(spec, raw.get("status") or {}, command.reschedule_at,
                                                            excluded=excluded)
                if not plan.changed and not reschedule:
                    return ok(trim(raw), noop=True)
                spec["placement"] = plan.placement
                annotations = meta.setdefault("annotations", {})
                for k, v in plan.annotations.items():
                    if v is None:
                        annotations.pop(k, None)
                    else:
                        annotations[k] = v
                if reschedule:
                    spec["rescheduleTriggeredAt"] = command.reschedule_at
                meta["generation"] = meta.get("generation", 1) + 1
                return ok(self._bump(raw))
            case ResumeBinding():
                spec = raw.setdefault("spec", {})
                if (spec.get("suspension") or {}).get("scheduling") is not True:
                    return ok(trim(raw), noop=True)
                if self.resume_failures > 0:  # a transient failure, as the API's 5xx (tests of retries)
                    self.resume_failures -= 1
                    return fail("InternalError", "injected failure", retryable=True)
                spec["suspension"].pop("scheduling")
                annotations = meta.setdefault("annotations", {})
                annotations.pop(ADMISSION_ANNOTATION, None)
                annotations.pop(EVICTED_FOR_ANNOTATION, None)
                annotations[ADMITTED_REQUEST_ANNOTATION] = json.dumps(dict(command.admitted_request),
                                                                      separators=(",", ":"))
                meta["generation"] = meta.get("generation", 1) + 1
                self.resumed.append(target)
                return ok(self._bump(raw))
            case EvictBinding():
                spec = raw.setdefault("spec", {})
                annotations = meta.setdefault("annotations", {})
                wanted = {ADMISSION_ANNOTATION: command.reason, EVICTED_FOR_ANNOTATION: command.for_binding}
                suspended = (spec.get("suspension") or {}).get("scheduling") is True
                if suspended and not spec.get("clusters") and ADMITTED_REQUEST_ANNOTATION not in annotations and \
                        all(annotations.get(k) == v for k, v in wanted.items()):
                    return ok(trim(raw), noop=True)
                if not (suspended and not spec.get("clusters")):
                    spec.setdefault("suspension", {})["scheduling"] = True
                    spec.pop("clusters", None)
                    meta["generation"] = meta.get("generation", 1) + 1
                annotations.update(wanted)
                annotations.pop(ADMITTED_REQUEST_ANNOTATION, None)
                self.evicted.append(target)
                return ok(self._bump(raw))
            case SuspendDispatching():
                spec = raw.setdefault("spec", {})
                annotations = meta.setdefault("annotations", {})
                if (spec.get("suspension") or {}).get("dispatching") is True and \
                        annotations.get(OVERRUN_ANNOTATION) == command.reason:
                    return ok(trim(raw), noop=True)
                if (spec.get("suspension") or {}).get("dispatching") is not True:
                    spec.setdefault("suspension", {})["dispatching"] = True
                    meta["generation"] = meta.get("generation", 1) + 1
                annotations[OVERRUN_ANNOTATION] = command.reason
                return ok(self._bump(raw))
            case AdmitRequest():
                spec = raw.setdefault("spec", {})
                annotations = meta.setdefault("annotations", {})
                request = json.dumps(dict(command.admitted_request), separators=(",", ":"))
                lift = OVERRUN_ANNOTATION in annotations and (spec.get("suspension") or {}).get("dispatching") is True
                if not lift and OVERRUN_ANNOTATION not in annotations and \
                        annotations.get(ADMITTED_REQUEST_ANNOTATION) == request:
                    return ok(trim(raw), noop=True)
                if lift:
                    spec["suspension"].pop("dispatching")
                    meta["generation"] = meta.get("generation", 1) + 1
                annotations.pop(OVERRUN_ANNOTATION, None)
                annotations[ADMITTED_REQUEST_ANNOTATION] = request
                return ok(self._bump(raw))
            case SetAdmissionHold() | SetAdmissionChecks():
                key, text = (command.annotation, command.text) if isinstance(command, SetAdmissionHold) else \
                    (ADMISSION_CHECKS_ANNOTATION, annotation_text(command.checks))
                annotations = meta.setdefault("annotations", {})
                if annotations.get(key) == (text or None):
                    return ok(trim(raw), noop=True)
                if text:
                    annotations[key] = text
                else:
                    annotations.pop(key, None)
                return ok(self._bump(raw))
            case UpdateQueueStatus():
                wanted = {"allocated": dict(command.allocated), "pending": command.pending,
                          "running": command.running, "inqueue": command.inqueue}
                return self._set_status(raw, {**(raw.get("status") or {}), **wanted}, ok)
            case ReleasePod():
                return self._release_pod(raw, command, ok)
            case EmitMemberEvent():
                self.member_events.append(command)
                return ok(None)
        raise AssertionError(f"unhandled command {command!r}")

    def _release_pod(self, raw: dict[str, Any], command: ReleasePod, ok: Any) -> list[tuple[str, Event]]:
        """The member executor's ReleasePod (``adapters/kubernetes/members.py``): tether's terms merged into the
        pod's current affinity, the gate removed and the note annotated, in one write; a pod without the gate is
        left alone."""
        spec, meta = raw.setdefault("spec", {}), raw["metadata"]
        gates = [g for g in spec.get("schedulingGates") or [] if isinstance(g, dict)]
        if not any(g.get("name") == command.gate for g in gates):
            return ok(trim(raw), noop=True)  # type: ignore[no-any-return]
        affinity = dict(spec.get("affinity") or {})
        try:
            tightened = tighten_node_affinity(affinity.get("nodeAffinity"), required=command.required,
                                              preferred=command.preferred, path="spec.affinity.nodeAffinity")
        except InvalidAffinity:  # released without tether's terms, as the executor does
            tightened = None
        if tightened is not None and tightened.node_affinity != affinity.get("nodeAffinity"):
            spec["affinity"] = {**affinity, "nodeAffinity": tightened.node_affinity}
        remaining = [g for g in gates if g.get("name") != command.gate]
        if remaining:
            spec["schedulingGates"] = remaining
        else:
            spec.pop("schedulingGates", None)
        if command.note:
            meta.setdefault("annotations", {})[PLACEMENT_ANNOTATION] = command.note
        return ok(self._bump(raw))  # type: ignore[no-any-return]

    def _set_status(self, raw: dict[str, Any], status: dict[str, Any], ok: Any) -> list[tuple[str, Event]]:
        if raw.get("status") == status:
            return ok(trim(raw), noop=True)  # type: ignore[no-any-return]
        raw["status"] = status
        return ok(self._bump(raw))  # type: ignore[no-any-return]

    def lookup(self, identity: DataIdentity) -> Event:
        key = identity.key
        self.lookups.append(key)
        if key in self.catalog_failures:
            return DataLocationLookupFailed(identity=identity, message=self.catalog_failures[key])
        if key in self.catalog_refusals:
            return DataLocationLookupFailed(identity=identity, message=self.catalog_refusals[key], retryable=False)
        if identity.system in {"s3", "hdfs"}:
            return DataLocationResolved(identity=identity, location=identity.name)
        if key not in self.catalog:
            return DataSourceNotInCatalog(identity=identity, message=f"table {identity.name} does not exist")
        return DataLocationResolved(identity=identity, location=self.catalog[key])


def _expected_uid(command: Command) -> str:
    """The uid a command's target must have, for the commands whose executor reads the target by its reference
    (``KubeExecutor._read``): another object of the same name is not the one the command is about."""
    match command:
        case AddFinalizer(target=ref) | RemoveFinalizer(target=ref) | UpdateClaimStatus(claim=ref):
            return ref.uid
        case SetBindingPlacement(binding=ref) | SetBindingTiers(binding=ref) | ResumeBinding(binding=ref) | \
                SetAdmissionHold(binding=ref) | SetAdmissionChecks(binding=ref):
            return ref.uid
        case EvictBinding(binding=ref) | SuspendDispatching(binding=ref) | AdmitRequest(binding=ref):
            return ref.uid
        case ReleasePod(pod=ref):
            return ref.uid
    return ""


class Harness:
    """Runs the pipeline against a :class:`FakeCluster` until quiescent, recording the whole log."""

    def __init__(self, *, world: World | None = None, start_ms: int = 1_767_225_600_000,
                 echo_watch: bool = True) -> None:
        self.world = world or initial_world()
        self.cluster = FakeCluster()
        self.now_ms = start_ms
        self.echo_watch = echo_watch
        self.events: list[EventRecord] = []
        self.commands: list[CommandRecord] = []
        self.queue: deque[CommandRecord] = deque()

    # --- the loop -----------------------------------------------------------------------------------------

    def feed(self, event: Event, *, source: str = "watch", causation: str = "") -> list[CommandRecord]:
        self.now_ms += 1
        record = EventRecord(at_ms=self.now_ms, source=source, key=event_key(event), event=event,
                             causation=causation, offset=len(self.events) + 1)
        self.events.append(record)
        produced = step(self.world, record)
        for i, c in enumerate(produced):
            c.offset = len(self.commands) + i + 1
        self.commands.extend(produced)
        self.queue.extend(produced)
        return produced

    def settle(self, *, max_commands: int = 100_000) -> None:
        """Apply queued commands (FIFO) and feed their outcomes back until nothing is left to do."""
        done = 0
        while self.queue:
            record = self.queue.popleft()
            for source, event in self.cluster.apply(record):
                self.feed(event, source=source, causation=record.id)
                if self.echo_watch and isinstance(event, CommandSucceeded) and event.result is not None:
                    self.feed(ObjectObserved(obj=event.result))  # the watch delivers the same write again
            done += 1
            if done > max_commands:
                raise RuntimeError("the pipeline did not settle: a command loop?")

    def advance(self, ms: int) -> None:
        """Move the clock forward and fire the timers that are due (in due order), settling after each."""
        self.now_ms += ms
        while True:
            timers = self.cluster.timers.values()
            due = sorted((t.fire_at_ms, t.timer_id) for t in timers if t.fire_at_ms <= self.now_ms)
            if not due:
                return
            timer = self.cluster.timers.pop(due[0][1])
            self.feed(TimerFired(timer_id=timer.timer_id, purpose=timer.purpose, subject=timer.subject),
                      source="timer")
            self.settle()

    # --- user actions -------------------------------------------------------------------------------------

    def apply(self, raw: dict[str, Any]) -> None:
        """Create or update an object (as kubectl apply would) and settle."""
        self.feed(ObjectObserved(obj=self.cluster.put(raw)))
        self.settle()

    def delete(self, kind: str, namespace: str, name: str) -> None:
        obj, gone = self.cluster.delete(object_key(kind, namespace, name))
        self.feed(ObjectDeleted(obj=obj) if gone else ObjectObserved(obj=obj))
        self.settle()

    def obj(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cluster.get(ObjectKey(object_key(kind, namespace, name)))


