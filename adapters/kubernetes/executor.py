"""Applying tether's Kubernetes commands: read, compare, write the difference, guarded by resourceVersion.

Every command states a desired result (see ``core.commands``); its executor here is ``apply_<command_name>``.
Each one follows the controller-runtime discipline:

1. **read** the object (never trust the decider's possibly stale view);
2. **compare** with what the command asks; if already so, report success with ``noop`` — this is what makes
   at-least-once delivery and replays harmless;
3. **write only the difference**, with the resourceVersion just read as a precondition (in the merge patch's
   ``metadata.resourceVersion``, or a JSON-patch ``test``), so a concurrent writer makes the API answer 409
   instead of being overwritten;
4. on 409, **re-read and retry** (a few times, immediately: the conflict is the normal case under load);
   on 429/5xx/network errors retry with backoff a few times — never sooner than the answer's Retry-After, and
   not at all when that is longer than ``max_retry_after`` (the command fails as retryable at once and the
   decider's own retry timer asks again later, so a slot is not held for minutes); then report the outcome.

**Reads without a round trip.** With an :class:`ObjectCache` (the daemon feeds it from its watches, and every
answer of this executor's own writes goes into it), the *first* attempt of a command reads the last version of
the object seen there instead of GETting it — one API round trip less per write, on the path of every
decision. That version may be stale, so it is trusted for one thing only: building a write guarded by its
resourceVersion. The API accepts that write only if the object is still exactly that version, so the written
difference and the result are exactly those a fresh read would have produced. Everything else is decided from
a fresh read: a 404/409/422 answer to a write built from the cache, or a cached version that says there is
nothing to do (``noop``), makes the command start over with a GET, as without a cache (not counted as a
conflict); an object missing from the cache (or cached with another uid) is read with a GET. The idempotence
of step 2 is therefore unchanged: a no-op is only ever reported from what the API returned just before.

The outcome is an event: :class:`~tether.core.events.CommandSucceeded` with the object the API returned (so
the world learns the new resourceVersion at once), or :class:`~tether.core.events.CommandFailed` with the
API's reason and whether retrying can help. A 4xx that retrying cannot fix (422 Invalid, 403 Forbidden) is
also logged with the command id and key — the command record itself, in the commands stream, is the
dead-letter: nothing is lost, and the decider will not send exactly that request again.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import structlog

from tether.adapters.kubernetes.manifests import data_source_manifest
from tether.core import api
from tether.core.commands import (
    AddFinalizer,
    Command,
    CreateDataSource,
    DeleteDataSource,
    EmitKubernetesEvent,
    RemoveFinalizer,
    SetBindingPlacement,
    SetBindingTiers,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    command_name,
    command_target,
)
from tether.core.datadependency.tiers import plan_command
from tether.core.envelope import CommandRecord
from tether.core.events import CommandFailed, CommandSucceeded, Event
from tether.core.keys import LOCATION_ANNOTATION
from tether.core.kube import KubeObject, ObjectRef, as_json, object_key, trim
from tether.projections.versions import stale

from .admission_executor import ADMISSION_COMMANDS, AdmissionCommands
from .client import BY_KIND, DATASOURCES, JSON_PATCH, KubeClient, KubeError, Resource, merge_patch
from .competing import CompetingWrites
from .events import EventRecorder

log = structlog.get_logger("tether.executor")

#: The commands this executor applies (the others go to the catalog and timer adapters).
KUBE_COMMANDS: tuple[type[Command], ...] = (
    AddFinalizer, RemoveFinalizer, UpdateClaimStatus, UpdateDataSourceStatus, CreateDataSource,
    UpdateDataSourceLocality, DeleteDataSource, SetBindingPlacement, SetBindingTiers, EmitKubernetesEvent,
    *ADMISSION_COMMANDS,
)


class _Done(Exception):
    """Raised inside an attempt to finish with a given outcome."""

    def __init__(self, result: KubeObject | None, *, noop: bool) -> None:
        self.result = result
        self.noop = noop


class ObjectCache:
    """The last version seen of each object (by key), from watches and from the executor's own writes.

    Only an optimisation (module doc, "Reads without a round trip"): a stale entry costs one 409 and a GET, a
    missing one a GET. Bounded: past ``max_objects`` the entries seen longest ago are dropped.
    """

    def __init__(self, max_objects: int = 100_000) -> None:
        self.max_objects = max_objects
        self._objects: dict[str, KubeObject] = {}

    def __len__(self) -> int:
        return len(self._objects)

    def observe(self, obj: KubeObject, deleted: bool = False) -> None:
        """Record ``obj`` (the signature of ``WatchSource(on_object=...)``); an older version than the one held
        (both resourceVersions numeric, as etcd's are) is ignored."""
        key = obj.key
        held = self._objects.pop(key, None)
        if deleted:
            return
        if held is not None and stale(obj.metadata.resource_version, held.metadata.resource_version):
            obj = held  # (the same resourceVersion is the same object: either will do)
        self._objects[key] = obj
        if len(self._objects) > self.max_objects:
            del self._objects[next(iter(self._objects))]

    def get(self, key: str) -> KubeObject | None:
        return self._objects.get(key)


class _Attempt:
    """One attempt at a command: whether it may read from the cache, and whether its read came from there."""

    __slots__ = ("cache", "cached")

    def __init__(self, cache: ObjectCache | None) -> None:
        self.cache = cache
        self.cached = False

    def known(self, ref: ObjectRef) -> dict[str, Any] | None:
        if self.cache is None:
            return None
        obj = self.cache.get(object_key(ref.kind, ref.namespace, ref.name))
        if obj is None or (ref.uid and obj.metadata.uid != ref.uid):
            return None
        self.cached = True
        known: dict[str, Any] = as_json(obj)
        return known


_FRESH = _Attempt(None)

#: The wire names of the fields the executor writes on tether's kinds (``core.api``, their one description).
_CLAIM_STATUS = api.field_names(api.DataSourceClaimStatus)
_SOURCE_SPEC = api.field_names(api.DataSourceSpec)
_SOURCE_STATUS = api.field_names(api.DataSourceStatus)
_LOCALITY = api.field_names(api.Locality)


def keep_transition_times(wanted: list[dict[str, Any]], current: object) -> list[dict[str, Any]]:
    """``wanted`` conditions with the ``lastTransitionTime`` of the object's own condition of each type whose status
    is the same: the transition happened when it is recorded to have happened, whoever recorded it.

    A command carries the time of the event it was decided at (the deciding daemon's clock). Two writers deciding
    the same transition (a second daemon, a decision from a world one write behind) would otherwise each write
    their own time, and the second write changes nothing but that — the rule of ``core.kube.set_condition``,
    applied again to what was just read."""
    if not isinstance(current, list) or not current:
        return wanted
    since = {c.get("type"): (c.get("status"), c.get("lastTransitionTime")) for c in current if isinstance(c, dict)}
    out = []
    for condition in wanted:
        status, at = since.get(condition.get("type"), (None, None))
        if status == condition.get("status") and at and condition.get("lastTransitionTime") != at:
            condition = {**condition, "lastTransitionTime": at}
        out.append(condition)
    return out


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def reschedule_needed(spec: dict[str, Any], status: dict[str, Any], at: str, *, excluded: tuple[str, ...]) -> bool:
    """Whether ``spec.rescheduleTriggeredAt = at`` still has a job to do on the binding as just read.

    Its meaning is "Karmada, schedule this binding afresh": it is satisfied when the binding runs on no excluded
    cluster any more, or when a trigger is already pending (later than ``status.lastScheduledTime``: Karmada has
    not scheduled since). Rewriting it then only moves the time (two writers would each write their own clock's)
    and would make Karmada schedule once more for nothing. Otherwise a later trigger than the one on record."""
    wanted = _time(at)
    if wanted is None:
        return False
    scheduled = {t.get("name") for t in spec.get("clusters") or [] if isinstance(t, dict)}
    if scheduled.isdisjoint(excluded):
        return False
    existing = _time(spec.get("rescheduleTriggeredAt"))
    if existing is None:
        return True
    if existing >= wanted:
        return False
    last = _time(status.get("lastScheduledTime"))
    return last is not None and existing <= last  # else a trigger is pending: Karmada has not scheduled since


def _source_ref(name: str) -> ObjectRef:
    return ObjectRef(api_version=DATASOURCES.api_version, kind="DataSource", name=name)


def _failed_precondition(exc: KubeError) -> bool:
    """A JSON-patch ``test`` op failed (422 on the API server): the object changed since it was read. The API
    server's words are json-patch's ("testing value /metadata/resourceVersion failed"); any other 422 (a name
    with "test" in it, say) is a request it will never accept."""
    return exc.status == 422 and "testing value" in exc.message.lower()


class KubeExecutor(AdmissionCommands):
    """Applies Kubernetes commands through a :class:`KubeClient` (queue admission's from :class:`AdmissionCommands`)."""

    def __init__(self, kube: KubeClient, *, conflict_retries: int = 5, error_retries: int = 3,
                 backoff: float = 0.2, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 component: str = "tether", cache: ObjectCache | None = None,
                 writes: CompetingWrites | None = None, max_retry_after: float = 10.0) -> None:
        self.kube = kube
        self.max_retry_after = max_retry_after
        self.cache = cache
        self.writes = writes  # told of every write, to tell this process's writes from another writer's
        self.conflict_retries = conflict_retries
        self.error_retries = error_retries
        self.backoff = backoff
        self.sleep = sleep
        self.component = component
        self.events = EventRecorder(kube, component=component)

    def handles(self, command: Command) -> bool:
        return isinstance(command, KUBE_COMMANDS)

    async def apply(self, record: CommandRecord) -> list[Event]:
        command = record.command
        name = command_name(command)
        target = command_target(command)
        method: Callable[[Any, _Attempt], Awaitable[tuple[KubeObject | None, bool]]] = getattr(self, f"apply_{name}")
        if self.writes is None:
            return await self._apply(record, method, name, target)
        self.writes.writing(target)
        events: list[Event] = []
        try:
            events = await self._apply(record, method, name, target)
        finally:
            done = events[0] if events else None  # (a no-op's object is someone else's version, not a write of ours)
            self.writes.wrote(target, done.result if isinstance(done, CommandSucceeded) and not done.noop else None)
        return events

    async def _apply(self, record: CommandRecord,
                     method: Callable[[Any, _Attempt], Awaitable[tuple[KubeObject | None, bool]]],
                     name: str, target: str) -> list[Event]:
        attempt = _Attempt(self.cache)  # only the first attempt may read from the cache
        conflicts = errors = 0
        while True:
            try:
                result, noop = await method(record.command, attempt)
            except KubeError as exc:
                if attempt.cached and exc.status in (404, 409, 422):
                    attempt = _FRESH  # built from a stale version: decide again from a fresh read
                    continue
                attempt = _FRESH
                if (exc.status == 409 and exc.reason == "Conflict") or _failed_precondition(exc):
                    conflicts += 1  # someone wrote in between: re-read and try again
                    if conflicts <= self.conflict_retries:
                        continue
                elif exc.retryable:
                    errors += 1
                    wait = self.backoff * 2 ** (errors - 1) * (0.5 + random.random())
                    if exc.retry_after is not None:  # the server said when: not sooner (module doc)
                        wait = max(wait, exc.retry_after) if exc.retry_after <= self.max_retry_after else -1.0
                    if errors <= self.error_retries and wait >= 0:
                        await self.sleep(wait)
                        continue
                if not exc.retryable:
                    log.warning("command rejected", command=name, command_id=record.id, key=target,
                                status=exc.status, reason=exc.reason, message=exc.message)
                return [CommandFailed(command_id=record.id, command=name, target=target, reason=exc.reason,
                                      message=exc.message, retryable=exc.retryable)]
            if attempt.cached and noop:
                attempt = _FRESH  # "nothing to do" is only ever concluded from a fresh read
                continue
            if self.cache is not None and result is not None:
                self.cache.observe(result)
            return [CommandSucceeded(command_id=record.id, command=name, target=target, result=result, noop=noop)]

    # --- helpers -----------------------------------------------------------------------------------------

    async def _read(self, ref: ObjectRef, attempt: _Attempt) -> tuple[Resource, dict[str, Any] | None]:
        res = BY_KIND[ref.kind]
        obj = attempt.known(ref)
        if obj is None:
            obj = await self.kube.get(res, ref.name, namespace=ref.namespace)
        if obj is not None and ref.uid and obj.get("metadata", {}).get("uid") != ref.uid:
            obj = None  # same name, another object: the command was about one that is gone
        return res, obj

    # --- one method per command --------------------------------------------------------------------------

    async def apply_add_finalizer(self, c: AddFinalizer, attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        res, obj = await self._read(c.target, attempt)
        if obj is None:
            raise KubeError(404, "NotFound", f"{c.target.key} not found")
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        if c.finalizer in finalizers:
            return trim(obj), True
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                      "value": meta["resourceVersion"]}]
        ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": c.finalizer} if finalizers
                   else {"op": "add", "path": "/metadata/finalizers", "value": [c.finalizer]})
        out = await self.kube.patch(res, c.target.name, ops, namespace=c.target.namespace, content_type=JSON_PATCH)
        return trim(out), False

    async def apply_remove_finalizer(self, c: RemoveFinalizer,
                                     attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        res, obj = await self._read(c.target, attempt)
        if obj is None:
            return None, True
        finalizers = obj["metadata"].get("finalizers") or []
        if c.finalizer not in finalizers:
            return trim(obj), True
        i = finalizers.index(c.finalizer)
        ops = [{"op": "test", "path": f"/metadata/finalizers/{i}", "value": c.finalizer},
               {"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]},
               {"op": "remove", "path": f"/metadata/finalizers/{i}"}]
        try:
            out = await self.kube.patch(res, c.target.name, ops, namespace=c.target.namespace,
                                        content_type=JSON_PATCH)
        except KubeError as exc:
            if exc.status == 404:
                return None, True
            raise
        if obj["metadata"].get("deletionTimestamp") and finalizers == [c.finalizer]:
            # the last finalizer of a deleting object: the write deleted it. The API answers with the object's last
            # stored state — finalizer included, as etcd returns a deleted key's value (the registry turns the update
            # into a delete: ShouldDeleteDuringUpdate), so the answer cannot tell. Report it gone: handing the answer
            # back would let the world re-learn an object whose DELETED watch event it may already have folded (a
            # ghost that blocks re-creating a DataSource of the same name), and ask to release it again
            return None, False
        return trim(out), False

    async def _patch_status(self, res: Resource, ref: ObjectRef, obj: dict[str, Any],
                            wanted: dict[str, Any]) -> tuple[KubeObject | None, bool]:
        current = obj.get("status") or {}
        patch = {k: v for k, v in wanted.items() if current.get(k) != v}
        if not patch:
            return trim(obj), True
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": patch}
        out = await self.kube.patch(res, ref.name, body, namespace=ref.namespace, subresource="status")
        return trim(out), False

    async def apply_update_claim_status(self, c: UpdateClaimStatus,
                                        attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        res, obj = await self._read(c.claim, attempt)
        if obj is None:
            return None, True
        status, bound = obj.get("status") or {}, _CLAIM_STATUS["bound_data_source"]
        wanted = {_CLAIM_STATUS["phase"]: c.phase, bound: c.bound_data_source or None,
                  _CLAIM_STATUS["conditions"]: keep_transition_times(as_json(c.conditions),
                                                                     status.get(_CLAIM_STATUS["conditions"]))}
        if wanted[bound] is None and bound not in status:  # (None removes it: a merge patch)
            del wanted[bound]
        return await self._patch_status(res, c.claim, obj, wanted)

    async def apply_update_data_source_status(self, c: UpdateDataSourceStatus,
                                              attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        ref = _source_ref(c.name)
        _, obj = await self._read(ref, attempt)
        if obj is None:
            return None, True
        wanted: dict[str, Any] = {_SOURCE_STATUS["claim_refs"]: as_json(c.claim_refs),
                                  _SOURCE_STATUS["bound_claims"]: c.bound_claims}
        if c.conditions:
            wanted[_SOURCE_STATUS["conditions"]] = as_json(c.conditions)
        return await self._patch_status(DATASOURCES, ref, obj, wanted)

    async def apply_create_data_source(self, c: CreateDataSource,
                                       attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        try:
            out = await self.kube.create(DATASOURCES, data_source_manifest(c))
        except KubeError as exc:
            if exc.status != 409:
                raise
            existing = await self.kube.get(DATASOURCES, c.name)
            if existing is None:
                raise
            spec = existing.get("spec") or {}
            same = (spec.get(_SOURCE_SPEC["system"]), spec.get(_SOURCE_SPEC["type"]), spec.get(_SOURCE_SPEC["name"]),
                    spec.get(_SOURCE_SPEC["attributes"]) or {}) == (
                c.identity.system, c.identity.type, c.identity.name, dict(c.identity.attributes))
            if not same:
                raise KubeError(409, "AlreadyExists", f"DataSource {c.name} exists for another data source") from exc
            return trim(existing), True
        return trim(out), False

    async def apply_update_data_source_locality(self, c: UpdateDataSourceLocality,
                                                attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        _, obj = await self._read(_source_ref(c.name), attempt)
        if obj is None:
            raise KubeError(404, "NotFound", f"DataSource {c.name} not found")
        meta = obj["metadata"]
        clusters = list(c.cluster_names)
        names = _LOCALITY["cluster_names"]
        if ((obj.get("spec") or {}).get(_SOURCE_SPEC["locality"]) or {}).get(names) == clusters and (
                meta.get("annotations") or {}).get(LOCATION_ANNOTATION) == c.location:
            return trim(obj), True
        body = {"metadata": {"resourceVersion": meta["resourceVersion"],
                             "annotations": {LOCATION_ANNOTATION: c.location}},
                "spec": {_SOURCE_SPEC["locality"]: {names: clusters}}}
        return trim(await self.kube.patch(DATASOURCES, c.name, body)), False

    async def apply_delete_data_source(self, c: DeleteDataSource,
                                       attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        out = await self.kube.delete(DATASOURCES, c.name, uid=c.uid)
        if out is None:
            return None, True
        return (trim(out) if out.get("kind") == "DataSource" else None), False

    async def apply_set_binding_placement(self, c: SetBindingPlacement | SetBindingTiers,
                                          attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        """``SetBindingPlacement`` (and ``SetBindingTiers``: :meth:`apply_set_binding_tiers`) on the binding as just
        read: tether's share of its placement planned from it, written with ``rescheduleTriggeredAt`` while that has
        a job to do, guarded by its resourceVersion; nothing when nothing changes."""
        res, obj = await self._read(c.binding, attempt)
        if obj is None:
            return None, True
        spec = obj.get("spec") or {}
        meta = obj["metadata"]
        plan, excluded, injected = plan_command(c, spec=spec, annotations=meta.get("annotations") or {})
        reschedule = injected and reschedule_needed(spec, obj.get("status") or {}, c.reschedule_at, excluded=excluded)
        if not plan.changed and not reschedule:
            return trim(obj), True
        body: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"]}}
        if plan.annotations:
            body["metadata"]["annotations"] = plan.annotations
        spec_patch: dict[str, Any] = {}
        placement_patch = merge_patch(spec.get("placement") or {}, plan.placement)
        if placement_patch:
            spec_patch["placement"] = placement_patch
        if reschedule:
            spec_patch["rescheduleTriggeredAt"] = c.reschedule_at
        if spec_patch:
            body["spec"] = spec_patch
        out = await self.kube.patch(res, c.binding.name, body, namespace=c.binding.namespace)
        return trim(out), False

    async def apply_set_binding_tiers(self, c: SetBindingTiers,
                                      attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        return await self.apply_set_binding_placement(c, attempt)

    async def apply_emit_kubernetes_event(self, c: EmitKubernetesEvent,
                                          attempt: _Attempt = _FRESH) -> tuple[KubeObject | None, bool]:
        """An Event, written as client-go's recorder writes one (``events.py``): a repeat counted on the Event
        already written, similar ones aggregated, a flood cut per object (a no-op: the decision is in the log)."""
        return None, not await self.events.record(c)
