"""The pod mutating webhook of the member clusters: gate the pods tether places, record each answer in the log.

Path ``/mutate/pods/{cluster}`` on :class:`~.webhook.WebhookServer`: a member's MutatingWebhookConfiguration
(``ops/members/``) points at its own path, so the member a request comes from is in the URL — an AdmissionReview
does not say which API server sent it, and a pod ``ml/worker-0`` may exist in several members. A path naming a
member tether is not connected to is answered 503 (the webhook's ``failurePolicy`` applies), as is a member whose
lists have not all ended: its picture is incomplete, and a pod admitted from it could be misjudged (its Job
unknown). The control plane's own lists do not matter here — pod placement never waits for Karmada's relists.

**The decision** is :func:`tether.core.placement.webhook_decision.decide_pod_gate`, a pure function of the request and
of the member as the world holds it: no call out on the API server's write path.

**Recorded before answering.** The decision is appended as a :class:`~tether.core.events.PodGateDecided` (the
request's object key, the patch, the member's log position it was decided at) before the answer goes back, so
no pod is ever gated without the log saying why; if the append fails, the request fails (500) and the
failurePolicy decides, as for tether being down. Concurrent requests share one append (:class:`GroupAppend`):
a burst of pod creations — a 1000-pod group — costs a few log commits, not one each. A dry-run request is answered
the same way but not recorded (the webhook declares ``sideEffects: NoneOnDryRun``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from tether.core.envelope import EventRecord
from tether.core.events import PodGateDecided, event_key
from tether.core.placement.webhook_decision import decide_pod_gate
from tether.core.world import World

from .webhook import AdmissionRequest, NotServing, WebhookAnswer

log = structlog.get_logger("tether.pod_webhook")

PATH = "/mutate/pods/{cluster}"

Append = Callable[[Sequence[EventRecord]], Awaitable[object]]


class GroupAppend:
    """Appends records to the events stream, every record submitted while an append runs going into the next one
    (group commit). Each caller waits for the append that holds its record, and sees its failure."""

    def __init__(self, append: Append) -> None:
        self._append = append
        self._queue: list[tuple[EventRecord, asyncio.Future[None]]] = []
        self._running: asyncio.Task[None] | None = None

    async def __call__(self, record: EventRecord) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((record, done))
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._drain())
        await done

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self._append([record for record, _ in batch])
            except Exception as exc:  # each waiting request fails: its webhook's failurePolicy decides
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for _, done in batch:
                if not done.done():
                    done.set_result(None)


class PodWebhook:
    """The handler (module doc). ``world`` returns the daemon's current world; ``append`` appends records to the
    events stream."""

    path = PATH

    def __init__(self, *, world: Callable[[], World], append: Append, clock: Callable[[], float] = time.time) -> None:
        self.world = world
        self.record = GroupAppend(append)
        self.clock = clock

    async def __call__(self, request: AdmissionRequest, /, **params: str) -> WebhookAnswer:
        cluster = params.get("cluster", "")
        state = self.world().members.clusters.get(cluster)
        if state is None:
            raise NotServing(f"tether is not connected to a member cluster named {cluster!r}")
        if state.lists_pending:
            raise NotServing(f"member cluster {cluster}: lists pending ({', '.join(sorted(state.lists_pending))})")
        obj: Any = request.object
        meta = obj.get("metadata") if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}
        namespace = request.namespace or str(meta.get("namespace") or "")
        decision = decide_pod_gate(state=state, operation=request.operation, namespace=namespace, pod=obj,
                                   request_uid=request.uid)
        if not request.dry_run:
            event = PodGateDecided(cluster=cluster, namespace=namespace, request_uid=request.uid,
                                   gated=decision.gated, name=request.name or str(meta.get("name") or ""),
                                   generate_name=str(meta.get("generateName") or ""), patch=decision.patch,
                                   reason=decision.reason, decided_at=state.position)
            await self.record(EventRecord(at_ms=int(self.clock() * 1000), source="webhook", key=event_key(event),
                                          event=event))
        if decision.gated:
            log.debug("pod gated", cluster=cluster, namespace=namespace, reason=decision.reason)
        return WebhookAnswer(patch=decision.patch)


__all__ = ["PATH", "GroupAppend", "PodWebhook"]
