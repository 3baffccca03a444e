"""Per-kind behaviour of the built-in kinds (the apiserver's "registry strategies").

Only what tether (and a faithful test) can observe: namespaces get the ``kubernetes`` finalizer and phase and are
emptied asynchronously when deleted; pods get the usual defaults, a ``Pending`` status, the scheduling-gate rules
and graceful deletion (with a kubelet stand-in that ends it at once); deployments are validated for a selector
that matches the template; Events for their namespace and, with an ``eventTime``, their reporting fields; CRDs
register their kind (with the ``Established`` and ``NamesAccepted`` conditions)
and take their objects with them when deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

from tether.core.keys import NAMESPACE_NAME_LABEL

from . import scheduling_gates
from .resources import ResourceType, qualified_name_causes, type_from_crd
from .schema import Cause
from .selectors import match_label_selector_object
from .store import Obj, Store, now_rfc3339
from .watch import Event


class BaseStrategy:
    def prepare(self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None) -> None:
        return None

    def validate(
        self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None
    ) -> list[Cause]:
        return []

    def committed(self, store: Store, rt: ResourceType, ev: Event) -> None:
        return None

    def grace_period(self, rt: ResourceType, obj: Obj, options: Obj) -> int | None:
        return None  # no graceful deletion: DELETE removes the object unless finalizers hold it


class NamespaceStrategy(BaseStrategy):
    """Namespace deletion empties the namespace in the background, then removes it (like the namespace
    controller; real clusters take seconds, we take milliseconds — tests must tolerate both)."""

    def __init__(self, *, reap_interval: float = 0.02) -> None:
        self.reap_interval = reap_interval
        self.reaping: set[str] = set()

    def prepare(self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None) -> None:
        if old is None:
            new.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            new["status"] = {"phase": "Active"}
        elif subresource == "delete" or new["metadata"].get("deletionTimestamp"):
            new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
        new["metadata"].setdefault("labels", {})[NAMESPACE_NAME_LABEL] = new["metadata"]["name"]

    def committed(self, store: Store, rt: ResourceType, ev: Event) -> None:
        name = ev.obj["metadata"]["name"]
        if ev.type == "MODIFIED" and ev.obj["metadata"].get("deletionTimestamp") and name not in self.reaping:
            self.reaping.add(name)
            store.spawn(self._reap(store, name))

    async def _reap(self, store: Store, namespace: str) -> None:
        try:
            while True:
                remaining = 0
                for rt in list(store.types.values()):
                    if not rt.namespaced:
                        continue
                    for obj in list(store.iter_objects(rt.key, namespace)):
                        remaining += 1
                        if not obj["metadata"].get("deletionTimestamp"):
                            # Gone meanwhile or refused (webhook): retried next round.
                            with contextlib.suppress(Exception):
                                await store.delete(rt, obj["metadata"]["name"], namespace=namespace)
                if remaining == 0:
                    break
                await asyncio.sleep(self.reap_interval)
            store.remove_now(store.type_for("", "namespaces"), "", namespace)
        finally:
            self.reaping.discard(namespace)


_POD_DEFAULTS = {
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "schedulerName": "default-scheduler",
    "securityContext": {},
    "enableServiceLinks": True,
    "preemptionPolicy": "PreemptLowerPriority",
    "priority": 0,
}


class PodStrategy(BaseStrategy):
    def prepare(self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None) -> None:
        if old is not None:
            return
        spec = new.setdefault("spec", {})
        for k, v in _POD_DEFAULTS.items():
            spec.setdefault(k, copy.deepcopy(v))
        for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
            if isinstance(c, dict):
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
                c.setdefault("imagePullPolicy", "IfNotPresent")
                c.setdefault("resources", {})
        has_requests = any((c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits")
                           for c in spec.get("containers") or [] if isinstance(c, dict))
        new["status"] = {"phase": "Pending", "qosClass": "Burstable" if has_requests else "BestEffort"}

    def validate(
        self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None
    ) -> list[Cause]:
        causes: list[Cause] = []
        if old is None:
            containers = (new.get("spec") or {}).get("containers")
            if not containers:
                causes.append(("spec.containers", "FieldValueRequired", "Required value"))
            for i, c in enumerate(containers or []):
                if not isinstance(c, dict) or not c.get("name"):
                    causes.append((f"spec.containers[{i}].name", "FieldValueRequired", "Required value"))
                elif not c.get("image"):
                    causes.append((f"spec.containers[{i}].image", "FieldValueRequired", "Required value"))
        causes.extend(scheduling_gates.validate_pod(new, old, subresource=subresource))
        return causes

    def grace_period(self, rt: ResourceType, obj: Obj, options: Obj) -> int | None:
        """The pod registry's ``CheckGracefulDelete``: the requested grace, else the pod's
        ``terminationGracePeriodSeconds``; 0 for a pod no kubelet runs (unscheduled) or that has finished."""
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        requested = options.get("gracePeriodSeconds")
        period = int(requested) if requested is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            period = 0
        return 1 if period < 0 else period

    def committed(self, store: Store, rt: ResourceType, ev: Event) -> None:
        """A kubelet stand-in for graceful deletion: there are no containers to stop, so a bound pod whose grace
        period started is deleted at once with grace 0 and a UID precondition, as the kubelet ends it."""
        meta = ev.obj["metadata"]
        if (ev.type == "MODIFIED" and meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds")
                and (ev.obj.get("spec") or {}).get("nodeName")):
            options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
            store.spawn(self._finish(store, rt, meta.get("namespace", ""), meta["name"], options))

    @staticmethod
    async def _finish(store: Store, rt: ResourceType, namespace: str, name: str, options: Obj) -> None:
        with contextlib.suppress(Exception):  # gone or replaced meanwhile: nothing left to finish
            await store.delete(rt, name, namespace=namespace, options=options)


class DeploymentStrategy(BaseStrategy):
    def prepare(self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None) -> None:
        if old is None:
            new["status"] = {}
            spec = new.setdefault("spec", {})
            spec.setdefault("replicas", 1)
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})

    def validate(
        self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None
    ) -> list[Cause]:
        if subresource == "status":
            return []
        spec = new.get("spec") or {}
        selector = spec.get("selector")
        if not selector:
            return [("spec.selector", "FieldValueRequired", "Required value")]
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if not match_label_selector_object(selector, labels):
            return [("spec.template.metadata.labels", "FieldValueInvalid",
                     f"Invalid value: {labels}: `selector` does not match template `labels`")]
        if old is not None and (old.get("spec") or {}).get("selector") != selector:
            return [("spec.selector", "FieldValueInvalid", "Invalid value: field is immutable")]
        return []


#: kube-apiserver's limits on an Event that carries an ``eventTime`` (``ReasonLengthLimit`` and the others).
_EVENT_LIMITS = (("reportingInstance", 128), ("action", 128), ("reason", 128), ("message", 1024))


def event_causes(event: Obj) -> list[Cause]:
    """What kube-apiserver refuses of a core v1 Event, on create and update (``legacyValidateEvent``).

    Without an ``eventTime`` (client-go's recorder, tether's executor) the only rule is that the Event lives in its
    object's namespace — ``default`` (or none) for a cluster-scoped object. With one (the events.k8s.io style), an
    Event about a cluster-scoped object lives in ``default`` or ``kube-system``, and it needs a
    ``reportingComponent`` (a qualified name), a ``reportingInstance``, an ``action`` and a ``reason``, each within
    its limit, and a message of at most 1024 characters."""
    namespace = event["metadata"].get("namespace", "")
    involved = (event.get("involvedObject") or {}).get("namespace") or ""
    mismatch = ("involvedObject.namespace", "FieldValueInvalid",
                f'Invalid value: "{involved}": does not match event.namespace')
    if not event.get("eventTime"):
        allowed = (involved,) if involved else ("", "default")
        return [] if namespace in allowed else [mismatch]
    causes: list[Cause] = [mismatch] if not involved and namespace not in ("default", "kube-system") else []
    component = str(event.get("reportingComponent") or "")
    if not component:
        causes.append(("reportingComponent", "FieldValueRequired", "Required value"))
    causes += qualified_name_causes("reportingComponent", component)
    for field, limit in _EVENT_LIMITS:
        value = str(event.get(field) or "")
        if not value and field != "message":
            causes.append((field, "FieldValueRequired", "Required value"))
        elif len(value) > limit:
            causes.append((field, "FieldValueInvalid", f'Invalid value: "": can have at most {limit} characters'))
    return causes


class EventStrategy(BaseStrategy):
    def validate(
        self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None
    ) -> list[Cause]:
        return event_causes(new)


class CrdStrategy(BaseStrategy):
    def prepare(self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None) -> None:
        if subresource in ("status", "delete"):
            return
        spec = new.get("spec") or {}
        names = spec.get("names") or {}
        status = copy.deepcopy(new.get("status") or {})
        stamp = now_rfc3339()
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        for ctype, reason, msg in (("NamesAccepted", "NoConflicts", "no conflicts found"),
                                   ("Established", "InitialNamesAccepted", "the initial names have been accepted")):
            conds.setdefault(ctype, {"type": ctype, "status": "True", "lastTransitionTime": stamp,
                                     "reason": reason, "message": msg})
        status["conditions"] = list(conds.values())
        status["acceptedNames"] = {k: v for k, v in names.items()}
        stored = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
        status["storedVersions"] = sorted(set(status.get("storedVersions") or []) | set(stored))
        new["status"] = status

    def validate(
        self, store: Store, rt: ResourceType, new: Obj, old: Obj | None, subresource: str | None
    ) -> list[Cause]:
        spec = new.get("spec") or {}
        names = spec.get("names") or {}
        causes: list[Cause] = []
        if not spec.get("group"):
            causes.append(("spec.group", "FieldValueRequired", "Required value"))
        if not names.get("plural"):
            causes.append(("spec.names.plural", "FieldValueRequired", "Required value"))
        if not names.get("kind"):
            causes.append(("spec.names.kind", "FieldValueRequired", "Required value"))
        expected = f"{names.get('plural')}.{spec.get('group')}"
        if new["metadata"]["name"] != expected:
            causes.append(("metadata.name", "FieldValueInvalid",
                           f'Invalid value: "{new["metadata"]["name"]}": must be spec.names.plural+"."+spec.group'))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append(("spec.scope", "FieldValueNotSupported",
                           f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"'))
        versions = spec.get("versions") or []
        if sum(1 for v in versions if v.get("storage")) != 1:
            causes.append(("spec.versions", "FieldValueInvalid", "Invalid value: must have exactly one version "
                           "marked as storage version"))
        if old is None and (spec.get("group"), names.get("plural")) in store.types and \
                store.types[(spec.get("group"), names.get("plural"))].builtin:
            causes.append(("spec.group", "FieldValueInvalid", "Invalid value: conflicts with a built-in resource"))
        return causes

    def committed(self, store: Store, rt: ResourceType, ev: Event) -> None:
        crd = ev.obj
        spec = crd.get("spec") or {}
        key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        if ev.type == "DELETED":
            crt = store.types.get(key)
            if crt is not None and not crt.builtin:
                for obj in list(store.iter_objects(key)):
                    store.remove_now(crt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                store.unregister(key)
        elif not crd["metadata"].get("deletionTimestamp"):
            store.register(type_from_crd(crd))


def install(store: Store) -> None:
    store.strategies[("", "namespaces")] = NamespaceStrategy()
    store.strategies[("", "pods")] = PodStrategy()
    store.strategies[("apps", "deployments")] = DeploymentStrategy()
    store.strategies[("", "events")] = EventStrategy()
    store.strategies[("apiextensions.k8s.io", "customresourcedefinitions")] = CrdStrategy()


def crd_objects(store: Store) -> list[dict[str, Any]]:
    return list(store.iter_objects(("apiextensions.k8s.io", "customresourcedefinitions")))
