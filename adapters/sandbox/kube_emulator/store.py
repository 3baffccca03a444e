"""The object store: CRUD with the apiserver's semantics, one global resourceVersion, watch events.

Objects are plain dicts indexed ``objects[(group, plural)][namespace][name]`` so get/create/update cost O(1) in
the number of stored objects and a namespaced list costs O(objects in that namespace). Stored dicts are never
mutated after commit (every write builds a new dict), which lets watch events and in-flight responses share them
without copying.

Writes are ``async`` because admission webhooks are HTTP calls. Instead of a lock held across those awaits (which
would serialise every write and deadlock a webhook that calls back into the apiserver), a write is computed from a
snapshot and committed synchronously — no ``await`` between the final check and the commit, so it is atomic on the
event loop — if the object's resourceVersion is still the one it started from. Otherwise a PUT carrying a
resourceVersion fails with 409 Conflict, and a patch or unconditional PUT is recomputed, as the real server's
``GuaranteedUpdate`` does.

Semantics kept faithful because tether depends on them: ``generation`` starts at 1 and bumps only when something
outside ``metadata`` (and outside ``status`` when the status subresource is on) changes; the status subresource
only writes status and the main endpoint ignores status; a no-op write returns the stored object without a new
resourceVersion or event; DELETE with finalizers sets ``deletionTimestamp`` (grace 0) and bumps ``generation``
(the registry's ``markAsDeleting``: controllers must notice that the object is going), forbids new finalizers, and
removes the object when the last one goes. That last write is never stored: the real registry turns an update
that empties the finalizers of an object being deleted into a delete (``ShouldDeleteDuringUpdate``), so watchers
see a single DELETED — carrying the last stored state, finalizers included, at the deletion's resourceVersion, as
etcd's watch delivers a deleted key's previous value — and the writer gets that same object back.
Which changes bump ``generation`` is per kind (:func:`_bumps_generation`).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import random
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from . import errors, schema
from .resources import ResourceKey, ResourceType, builtin_types, label_causes, validate_name
from .watch import Event, WatchHub

Obj = dict[str, Any]
_ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet
_MANAGED_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                 "selfLink", "namespace", "name")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Strategy(Protocol):
    """Per-kind hooks for built-in semantics (pods, namespaces, CRDs...). All optional."""

    def prepare(self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None) -> None: ...

    def validate(
        self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None
    ) -> list[schema.Cause]: ...

    def committed(self, store: Store, rt: ResourceType, ev: Event) -> None: ...

    def grace_period(self, rt: ResourceType, obj: Obj, options: Obj) -> int | None:
        """Seconds of graceful deletion for ``obj`` (``CheckGracefulDelete``), or None for a kind without it."""
        ...


class Admission(Protocol):
    async def admit(
        self, *, store: Store, rt: ResourceType, version: str, operation: str, subresource: str | None,
        obj: Obj | None, old: Obj | None, namespace: str, name: str, dry_run: bool, mutating: bool,
    ) -> Obj | None: ...


class Store:
    def __init__(self, *, history_size: int = 10_000) -> None:
        self.types: dict[ResourceKey, ResourceType] = {}
        self.by_gv: dict[tuple[str, str], dict[str, ResourceType]] = collections.defaultdict(dict)
        self.objects: dict[ResourceKey, dict[str, dict[str, Obj]]] = collections.defaultdict(dict)
        self.rv = 1
        self.hub = WatchHub(history_size=history_size)
        self.strategies: dict[ResourceKey, Strategy] = {}
        self.admission: Admission | None = None
        self.listeners: list[Callable[[Event], None]] = []
        self.background: set[asyncio.Task[Any]] = set()
        for rt in builtin_types():
            self.register(rt)

    # -- registry ---------------------------------------------------------------------------------------------
    def register(self, rt: ResourceType) -> None:
        old = self.types.get(rt.key)
        if old is not None:
            for v in old.versions:
                self.by_gv[(old.group, v)].pop(old.plural, None)
        self.types[rt.key] = rt
        for v in rt.versions:
            self.by_gv[(rt.group, v)][rt.plural] = rt

    def unregister(self, key: ResourceKey) -> None:
        """Stop serving a resource (its CRD is gone). Its open watches end, as the real server tears down the
        CRD's storage: a client that watches again learns that the resource is no longer served (404)."""
        rt = self.types.pop(key, None)
        if rt is not None:
            for v in rt.versions:
                self.by_gv[(rt.group, v)].pop(rt.plural, None)
                if not self.by_gv[(rt.group, v)]:
                    del self.by_gv[(rt.group, v)]
            self.objects.pop(key, None)
            self.hub.drop(key=key)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.by_gv.get((group, version), {}).get(plural)

    def type_for(self, group: str, plural: str) -> ResourceType:
        return self.types[(group, plural)]

    # -- reads ------------------------------------------------------------------------------------------------
    def get_obj(self, key: ResourceKey, namespace: str, name: str) -> Obj | None:
        return self.objects.get(key, {}).get(namespace, {}).get(name)

    def iter_objects(self, key: ResourceKey, namespace: str | None = None) -> Iterator[Obj]:
        buckets = self.objects.get(key, {})
        if namespace is not None:
            yield from buckets.get(namespace, {}).values()
            return
        for bucket in buckets.values():
            yield from bucket.values()

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.get_obj(rt.key, namespace, name)
        if obj is None:
            raise errors.not_found(resource=rt.plural, group=rt.group, name=name)
        return obj

    # -- commit -----------------------------------------------------------------------------------------------
    def _commit(self, rt: ResourceType, kind: str, namespace: str, obj: Obj, prev: Obj | None) -> Obj:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        bucket = self.objects[rt.key].setdefault(namespace, {})
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            bucket.pop(name, None)
            if not bucket:
                del self.objects[rt.key][namespace]
        else:
            bucket[name] = obj
        ev = Event(rv=self.rv, key=rt.key, namespace=namespace, type=kind, obj=obj, prev=prev)
        self.hub.publish(ev)
        strategy = self.strategies.get(rt.key)
        if strategy is not None:
            strategy.committed(self, rt, ev)
        for listener in tuple(self.listeners):
            listener(ev)
        return obj

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # -- create -----------------------------------------------------------------------------------------------
    async def create(
        self, rt: ResourceType, body: Obj, *, version: str | None = None, namespace: str = "",
        dry_run: bool = False, subresource: str | None = None,
    ) -> Obj:
        version = version or rt.storage_version
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        obj = copy.deepcopy(body)
        self._check_kind(rt, version, obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request")
            namespace = namespace or body_ns or ""
            meta["namespace"] = namespace
        else:
            namespace = ""
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.internal("resourceVersion should not be set on objects to be created")
        if self.admission is not None:
            obj = await self.admission.admit(
                store=self, rt=rt, version=version, operation="CREATE", subresource=subresource, obj=obj,
                old=None, namespace=namespace, name=meta.get("name", ""), dry_run=dry_run, mutating=True) or obj
            meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choices(_ALNUM, k=5))
            else:
                raise errors.invalid(kind=rt.kind, group=rt.group, name="", causes=[
                    ("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")])
        name = meta["name"]
        validate_name(rt, name)
        if rt.namespaced:
            self._check_namespace(rt, namespace, name)
        for k in ("uid", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if rt.tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.status_subresource and not rt.builtin:
            obj.pop("status", None)  # create cannot set status when the status subresource is enabled
        obj = self._prepare_and_validate(rt, version, obj, None, subresource)
        if self.admission is not None:
            await self.admission.admit(
                store=self, rt=rt, version=version, operation="CREATE", subresource=subresource, obj=obj,
                old=None, namespace=namespace, name=name, dry_run=dry_run, mutating=False)
        if self.get_obj(rt.key, namespace, name) is not None:
            raise errors.already_exists(resource=rt.plural, group=rt.group, name=name)
        if rt.namespaced:
            self._check_namespace(rt, namespace, name)
        if dry_run:
            return obj
        return self._commit(rt, "ADDED", namespace, obj, None)

    def _check_kind(self, rt: ResourceType, version: str, obj: Obj) -> None:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind and kind != rt.kind:
            raise errors.bad_request(f"the API version in the data ({api_version}) does not match the expected "
                                     f"API version ({rt.api_version(version)})" if api_version and
                                     api_version != rt.api_version(version) else
                                     f"Object '{kind}' is not a {rt.kind}")
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version(rt.storage_version)

    def _check_namespace(self, rt: ResourceType, namespace: str, name: str) -> None:
        if not namespace:
            raise errors.bad_request("an empty namespace may not be set during creation")
        ns = self.get_obj(("", "namespaces"), "", namespace)
        if ns is None:
            raise errors.not_found(resource="namespaces", group="", name=namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                resource=rt.plural, group=rt.group, name=name,
                why=f"unable to create new content in namespace {namespace} because it is being terminated")

    def _prepare_and_validate(self, rt: ResourceType, version: str, obj: Obj, old: Obj | None,
                              subresource: str | None) -> Obj:
        strategy = self.strategies.get(rt.key)
        if strategy is not None:
            strategy.prepare(self, rt, obj, old, subresource)
        causes: list[schema.Cause] = []
        if not rt.builtin:
            validate = schema.validate_status_and_default if subresource == "status" and rt.status_subresource \
                else schema.validate_and_default  # (a status write is validated against the status schema only)
            obj, causes = validate(obj, rt.schema(version) or rt.schema(rt.storage_version))
        meta = obj.get("metadata") or {}
        for field in ("labels", "annotations"):
            for k, v in (meta.get(field) or {}).items():
                if not isinstance(v, str):
                    causes.append((f"metadata.{field}", "FieldValueTypeInvalid",
                                   f"Invalid value: {k}: must be a string"))
        causes.extend(label_causes(meta.get("labels")))
        if strategy is not None:
            causes.extend(strategy.validate(self, rt, obj, old, subresource))
        if causes:
            raise errors.invalid(kind=rt.kind, group=rt.group, name=meta.get("name", ""), causes=causes)
        return obj

    # -- update / patch ---------------------------------------------------------------------------------------
    async def update(
        self, rt: ResourceType, name: str, body: Obj, *, version: str | None = None, namespace: str = "",
        subresource: str | None = None, dry_run: bool = False,
    ) -> Obj:
        """PUT. A body with a stale ``metadata.resourceVersion`` is a 409 Conflict."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                                     f"({name})")
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request")
        wanted_rv = meta.get("resourceVersion")
        if not wanted_rv and not rt.unconditional_update:
            raise errors.invalid(kind=rt.kind, group=rt.group, name=name, causes=[(
                "metadata.resourceVersion", "FieldValueInvalid",
                "Invalid value: 0x0: must be specified for an update")])
        return await self._update(rt, version or rt.storage_version, namespace if rt.namespaced else "", name,
                                  lambda _old: copy.deepcopy(body), subresource=subresource, dry_run=dry_run,
                                  retry=not wanted_rv)

    async def patch(
        self, rt: ResourceType, name: str, apply: Callable[[Obj], Obj], *, version: str | None = None,
        namespace: str = "", subresource: str | None = None, dry_run: bool = False,
    ) -> Obj:
        """PATCH: ``apply`` maps the current object to the patched one (a patch carrying
        ``metadata.resourceVersion`` acts as a precondition)."""
        return await self._update(rt, version or rt.storage_version, namespace if rt.namespaced else "", name,
                                  apply, subresource=subresource, dry_run=dry_run, retry=True)

    async def _update(
        self, rt: ResourceType, version: str, namespace: str, name: str, compute: Callable[[Obj], Obj], *,
        subresource: str | None, dry_run: bool, retry: bool,
    ) -> Obj:
        for _attempt in range(16):
            old = self.get(rt, namespace, name)
            new = compute(copy.deepcopy(old))
            if not isinstance(new, dict):
                raise errors.bad_request("the body of the request was in an unknown format")
            new_meta = new.get("metadata")
            if not isinstance(new_meta, dict):
                new_meta = new["metadata"] = {}
            wanted_rv = new_meta.get("resourceVersion")
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(resource=rt.plural, group=rt.group, name=name)
            new = self._merge_for_update(rt, version, new, old, subresource)
            if self.admission is not None:
                new = await self.admission.admit(
                    store=self, rt=rt, version=version, operation="UPDATE", subresource=subresource, obj=new,
                    old=old, namespace=namespace, name=name, dry_run=dry_run, mutating=True) or new
                new = self._merge_for_update(rt, version, new, old, subresource)
            new = self._prepare_and_validate(rt, version, new, old, subresource)
            if self.admission is not None:
                await self.admission.admit(
                    store=self, rt=rt, version=version, operation="UPDATE", subresource=subresource, obj=new,
                    old=old, namespace=namespace, name=name, dry_run=dry_run, mutating=False)
            current = self.get(rt, namespace, name)
            if current is not old:
                if retry and not wanted_rv:
                    continue
                raise errors.conflict(resource=rt.plural, group=rt.group, name=name)
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if new == old:
                return old  # no-op: no new resourceVersion, no watch event
            if _bumps_generation(rt, new, old, subresource):
                new["metadata"]["generation"] = int(old["metadata"].get("generation") or 1) + 1
            if _empties_finalizers(rt, new, old):
                # Deleted instead of updated: the finalizer-less state is never stored, so no MODIFIED for it.
                if dry_run:
                    return copy.deepcopy(old)
                return self._commit(rt, "DELETED", namespace, copy.deepcopy(old), old)
            if dry_run:
                return new
            return self._commit(rt, "MODIFIED", namespace, new, old)
        raise errors.conflict(resource=rt.plural, group=rt.group, name=name)

    def _merge_for_update(self, rt: ResourceType, version: str, new: Obj, old: Obj, subresource: str | None) -> Obj:
        if subresource == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            if rt.annotations_bump_generation:
                # The Deployment status strategy keeps only spec and labels: the deployment controller writes its
                # revision annotation through /status, precisely so that it does not bump generation.
                annotations = (new.get("metadata") or {}).get("annotations")
                if annotations:
                    merged["metadata"]["annotations"] = annotations
                else:
                    merged["metadata"].pop("annotations", None)
            return merged
        self._check_kind(rt, version, new)
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        for k in _MANAGED_META:
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta.pop("managedFields", None)
        if rt.status_subresource and subresource is None:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if old_meta.get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or [] if f not in (old_meta.get("finalizers") or [])]
            if added:
                shown = ", ".join(f'"{f}"' for f in added)
                raise errors.invalid(kind=rt.kind, group=rt.group, name=old_meta["name"], causes=[(
                    "metadata.finalizers", "FieldValueForbidden",
                    f"Forbidden: no new finalizers can be added if the object is being deleted, found new "
                    f"finalizers []string{{{shown}}}")])
        return new

    # -- delete -----------------------------------------------------------------------------------------------
    async def delete(
        self, rt: ResourceType, name: str, *, namespace: str = "", options: Obj | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Returns ``(object, removed)``: removed is False when finalizers keep the object around."""
        namespace = namespace if rt.namespaced else ""
        options = options or {}
        old = self.get(rt, namespace, name)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise errors.conflict(resource=rt.plural, group=rt.group, name=name, why=(
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                f"{old['metadata']['uid']}"))
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise errors.conflict(resource=rt.plural, group=rt.group, name=name, why=(
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {old['metadata']['resourceVersion']}"))
        if self.admission is not None:
            await self.admission.admit(
                store=self, rt=rt, version=rt.storage_version, operation="DELETE", subresource=None, obj=None,
                old=old, namespace=namespace, name=name, dry_run=dry_run, mutating=False)
        if dry_run:
            return old, False
        meta = old["metadata"]
        finalizers = meta.get("finalizers") or []
        strategy = self.strategies.get(rt.key)
        grace = strategy.grace_period(rt, old, options) if strategy is not None else None
        if meta.get("deletionTimestamp"):
            # Already being deleted: only a shorter grace period changes anything (rest.BeforeDelete).
            pending = int(meta.get("deletionGracePeriodSeconds") or 0)
            if grace is None or pending == 0 or grace >= pending:
                return old, False
            return self._mark_deleting(rt, namespace, old, grace=grace, finalizers=finalizers)
        if grace is None and not (finalizers or rt.key == ("", "namespaces")):
            return self._commit(rt, "DELETED", namespace, copy.deepcopy(old), old), True
        return self._mark_deleting(rt, namespace, old, grace=grace, finalizers=finalizers)

    def _mark_deleting(self, rt: ResourceType, namespace: str, old: Obj, *, grace: int | None,
                       finalizers: list[str]) -> tuple[Obj, bool]:
        """The registry's deleting write, then the delete itself when nothing holds the object.

        Without graceful deletion (``markAsDeleting``): ``deletionTimestamp`` now, grace 0; written only because
        finalizers (or, for a namespace, its controller) hold the object. With it (pods: ``rest.BeforeDelete``):
        ``deletionTimestamp`` = now + grace, written even when the grace is 0 — watchers of pods always see the
        Terminating state before the DELETED — and deleted at once when the grace is 0 and no finalizer is left.
        The first deleting write bumps ``generation`` where the kind has one."""
        new = copy.deepcopy(old)
        meta = new["metadata"]
        if not meta.get("deletionTimestamp") and int(meta.get("generation") or 0) > 0:
            meta["generation"] = int(meta["generation"]) + 1
        at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=grace or 0)
        meta["deletionTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["deletionGracePeriodSeconds"] = grace or 0
        strategy = self.strategies.get(rt.key)
        if strategy is not None:
            strategy.prepare(self, rt, new, old, "delete")
        marked = self._commit(rt, "MODIFIED", namespace, new, old)
        if grace == 0 and not finalizers:
            return self._commit(rt, "DELETED", namespace, copy.deepcopy(marked), marked), True
        return marked, False

    def remove_now(self, rt: ResourceType, namespace: str, name: str) -> None:
        """Internal: drop an object regardless of finalizers (namespace and CRD clean-up)."""
        old = self.get_obj(rt.key, namespace, name)
        if old is not None:
            self._commit(rt, "DELETED", namespace, copy.deepcopy(old), old)


def _bumps_generation(rt: ResourceType, new: Obj, old: Obj, subresource: str | None) -> bool:
    """Whether an update moves ``metadata.generation``, the registry strategies' ``PrepareForUpdate`` rules:
    kinds that track it bump on any change outside ``metadata`` (and outside ``status`` when the status
    subresource is on: custom resources, CRDs, Deployments); apps/v1 Deployments also bump when their annotations
    change through the main endpoint, because the deployment controller copies them onto the ReplicaSets (it
    writes its own revision annotation through /status, which never bumps). Labels, finalizers and other
    metadata never bump. Kinds without generation (ConfigMaps, Pods as of v1.28, Namespaces...) never get one."""
    if not rt.tracks_generation:
        return False
    if _spec_part(rt, new) != _spec_part(rt, old):
        return True
    return rt.annotations_bump_generation and subresource is None and (
        (new["metadata"].get("annotations") or {}) != (old["metadata"].get("annotations") or {}))


def _empties_finalizers(rt: ResourceType, new: Obj, old: Obj) -> bool:
    """``ShouldDeleteDuringUpdate``: the update removes the last finalizer of an object whose deletion is due now
    (``deletionTimestamp`` set with no grace period left). Namespaces are finalized by their own controller."""
    old_meta = old["metadata"]
    return (rt.key != ("", "namespaces") and bool(old_meta.get("deletionTimestamp"))
            and not old_meta.get("deletionGracePeriodSeconds") and not new["metadata"].get("finalizers"))


def _spec_part(rt: ResourceType, obj: Obj) -> Obj:
    skip = ("metadata", "status") if rt.status_subresource else ("metadata",)
    return {k: v for k, v in obj.items() if k not in skip and k not in ("apiVersion", "kind")}
