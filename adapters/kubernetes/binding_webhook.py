"""The ResourceBinding mutating webhook's handler: the pure decision (``core.admission.webhook_decision``) on the
daemon's in-memory world, and the decision appended to the log before the answer goes back.

Path ``/mutate/resourcebindings`` on :class:`~.webhook.WebhookServer`, which answers 503 from a replica that is
not current (a standby, recovering); this handler adds its own condition — every control-plane list ended
(``current``, the daemon's ``control_plane_listed``) — and raises :class:`~.webhook.NotServing` (503) until
then: a binding admitted from a half-listed world could miss the claim that constrains it. The pod webhook on the
same server needs only its member's lists, so the check is the handler's, not the server's. Either way the
webhook's ``failurePolicy`` applies — see ``ops/webhook/README.md`` for the policy per case.

**Recorded before answering.** The decision (:class:`~tether.core.events.BindingAdmissionDecided`: the request's
object, the patch, the log position of the world it was decided from) is appended before the API server gets
the answer, so no binding is ever stored with a patch the log does not explain; if the append fails the request
fails (500) and the ``failurePolicy`` decides, as for tether being down. A dry-run request is answered the same
way but not recorded (the webhook declares ``sideEffects: NoneOnDryRun``).

A decision that changes the binding (a non-empty patch) is also one info line in the process's log — ``binding
suspended`` or ``binding placed``, with the offset of its record, the key and the position of the world it was
decided from — like the decisions the executors apply (``adapters/daemon/decision_log.py``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import structlog

from tether.core.admission.webhook_decision import decide_binding_admission
from tether.core.envelope import EventRecord
from tether.core.events import BindingAdmissionDecided
from tether.core.kube import KubeObject, ObjectMeta, trim
from tether.core.world import World

from .webhook import AdmissionRequest, NotServing, WebhookAnswer

PATH = "/mutate/resourcebindings"

log = structlog.get_logger("tether.decisions")


def _request_object(request: AdmissionRequest) -> tuple[str, KubeObject]:
    obj: dict[str, Any] = dict(request.object or {})
    obj.setdefault("kind", "ResourceBinding")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = request.name or str(meta.get("name") or meta.get("generateName") or "")
    key = f"ResourceBinding/{request.namespace or meta.get('namespace', '')}/{name}"
    try:
        return key, trim(obj)
    except (msgspec.ValidationError, TypeError, AttributeError):  # recorded all the same (the reason says why)
        return key, KubeObject(api_version=str(obj.get("apiVersion", "")), kind="ResourceBinding",
                               metadata=ObjectMeta(name=name, namespace=request.namespace))


class BindingWebhook:
    """The handler (see the module doc). ``world`` returns the daemon's current world; ``append`` appends
    records to the events stream."""

    path = PATH

    def __init__(self, *, world: Callable[[], World],
                 append: Callable[[Sequence[EventRecord]], Awaitable[object]],
                 current: Callable[[], tuple[bool, str]] = lambda: (True, "current"),
                 clock: Callable[[], float] = time.time,
                 on_patch: Callable[[str], None] = lambda key: None) -> None:
        self.world = world
        self.append = append
        self.current = current
        self.clock = clock
        self.on_patch = on_patch  # an UPDATE patched: the change it makes is tether's own (CompetingWrites.expect)

    async def __call__(self, request: AdmissionRequest) -> WebhookAnswer:
        listed, why = self.current()
        if not listed:
            raise NotServing(why)
        world = self.world()
        obj = dict(request.object or {})
        if request.namespace and isinstance(obj.get("metadata"), dict):  # a CREATE may omit it in the body
            obj["metadata"] = {**obj["metadata"], "namespace": obj["metadata"].get("namespace") or request.namespace}
        verdict = decide_binding_admission(world=world, operation=request.operation, obj=obj)
        if not request.dry_run:
            key, recorded = _request_object(AdmissionRequest(uid=request.uid, operation=request.operation,
                                                             namespace=request.namespace, name=request.name,
                                                             object=obj))
            event = BindingAdmissionDecided(key=key, operation=request.operation, obj=recorded, patch=verdict.patch,
                                            reason=verdict.reason, decided_at=world.admission.position,
                                            suspended=verdict.suspended)
            stored = await self.append([EventRecord(at_ms=int(self.clock() * 1000), source="webhook", key=key,
                                                    event=event)])
            if verdict.patch and request.operation == "UPDATE":
                self.on_patch(key)
            if verdict.patch:
                # the log returns the records with their offsets (this decision's own position is its event's)
                offset = next((r.offset for r in stored if isinstance(r, EventRecord)), 0) \
                    if isinstance(stored, list) else 0
                log.info("binding suspended" if verdict.suspended else "binding placed", offset=offset, key=key,
                         decided_at=event.decided_at, operation=request.operation,
                         excluded=",".join(verdict.excluded) or "-", why=verdict.reason, decider="binding-webhook")
        return WebhookAnswer(patch=verdict.patch)
