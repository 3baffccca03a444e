"""List + watch of one Kubernetes resource into the event log.

A :class:`WatchSource` is the informer of tether, without a cache (the projections are the cache):

* it **lists** the resource and appends every object as :class:`~tether.core.events.ObjectObserved`, then an
  :class:`~tether.core.events.ObjectsListed` naming the keys that exist — so the world forgets what was deleted
  while nobody watched (after a restart, or a 410);
* it **watches** from the list's resourceVersion with bookmarks, so a reconnect resumes exactly where it left
  off and nothing is seen twice or missed; the server ending the stream (``timeoutSeconds``) is the normal case
  and simply reconnects;
* a stream the server ends cleanly is resumed **at once** (only a stream that ends immediately with nothing in
  it, again and again, is backed off like an error);
* **410 Gone** (the version fell out of the server's history) means relisting; other errors back off
  exponentially with jitter (0.2 s → 30 s) and retry forever — one broken watch never stops the daemon; an
  error with a Retry-After (429) waits at least that long;
* observations are appended in **batches**, which is what makes a 10k-object relist cost a handful of log
  transactions: a relist appends ``batch_size`` at a time; a watch event is appended at once (``flush_interval``
  0: on the next turn of the event loop) and the events that arrive while that append runs go together in the
  next one (group commit), so an idle watch adds no delay and a busy one still writes in batches;
* an object that cannot be trimmed into a :class:`~tether.core.kube.KubeObject` (a malformed answer) is logged
  with its key and kept as a dead letter in the log backend when it has one, and the watch goes on;
* an **optional** resource (``absent_ok``: a CRD that may not be installed — Volcano Queues and Jobs on the
  control plane, Godel PodGroups or Fluid operations in a member) that the server does not serve (404) lists as
  **empty**: an :class:`~tether.core.events.ObjectsListed` with no keys, so the lists waiting for it end and the
  rest of tether decides as usual. One warning says so when it becomes absent (not one per retry); the source
  then asks again every ``absent_retry`` seconds (±20 %), and a CRD installed later is listed — announced with
  its own ``ListsStarted`` like any relist — and watched from then on. A resource whose CRD is deleted while
  watched (the watch answers 404) goes the same way, and the empty list makes the world forget its objects,
  which the deletion took with it. Retrying with the error backoff instead would log a warning per attempt
  and, at its 30 s cap, ask no less often — but a warning a minute for a resource nobody installed is noise.
  A real server says "not served" as a plain-text ``404 page not found`` (a Status NotFound naming no object in
  a built-in group; ``KubeError.not_served``); the client reports either as a 404, and a list of a served
  resource never answers 404.
* a resource **served from another group** (``api_groups``, ``Resource.served_group``: a test's stand-in for a
  CRD of a shared cluster) is watched there, and its objects enter the log under the resource's own apiVersion,
  so that the projections cannot tell them from the real ones.

Time in the appended events is the wall clock at append — the only place where tether reads it for events.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import structlog

from tether.adapters.log import EventLog
from tether.core.envelope import EventRecord
from tether.core.events import Event, ListsStarted, ObjectDeleted, ObjectObserved, ObjectsListed, event_key, list_source
from tether.core.kube import KubeObject, trim

from .client import KubeClient, KubeError, Resource, served_from

log = structlog.get_logger("tether.watch")


def now_ms() -> int:
    return int(time.time() * 1000)


class WatchSource:
    """Keeps the log up to date with one resource (optionally one namespace / one field selector)."""

    def __init__(
        self, kube: KubeClient, log_: EventLog, resource: Resource, *, namespace: str = "",
        field_selector: str | None = None, batch_size: int = 256, flush_interval: float = 0.0,
        timeout_seconds: int = 300, on_object: Callable[[KubeObject, bool], None] | None = None,
        cluster: str = "", absent_ok: bool = False, absent_retry: float = 30.0,
        api_groups: Mapping[str, str] | None = None,
    ) -> None:
        self.kube = kube
        self.log = log_
        self.resource = served_from(resource, api_groups or {})  # where it is served (module doc)
        self.namespace = namespace
        self.field_selector = field_selector
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.timeout_seconds = timeout_seconds
        self.on_object = on_object  # e.g. the plugin ConfigMap holder of the catalog executor
        self.cluster = cluster  # a member cluster's source tags its events with the member's name
        # optional: a resource the server does not serve (404: its CRD is not installed) lists as empty (module doc)
        self.absent_ok = absent_ok
        self.absent_retry = absent_retry
        self.absent = False  # the server did not serve it at the last list (only with absent_ok)
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0
        self.errors = 0
        self.last_error = ""  # the last failure, in a few words (GET /status); "" until one happens
        self.appended = 0
        self._pending: list[Event] = []
        self._lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return (f"{self.cluster}:" if self.cluster else "") + f"{self.resource.plural}" + (
            f"@{self.namespace}" if self.namespace else "")

    @property
    def list_source(self) -> str:
        """This source's name in :class:`~tether.core.events.ListsStarted` (what its ObjectsListed carries)."""
        return list_source(self.resource.kind, self.namespace)

    async def _append(self, events: list[Event]) -> None:
        if not events:
            return
        at = now_ms()
        source = f"watch/{self.cluster}/{self.resource.plural}" if self.cluster else f"watch/{self.resource.plural}"
        records = [EventRecord(at_ms=at, source=source, key=event_key(e), event=e)
                   for e in events]
        await self.log.append("events", records)
        self.appended += len(records)

    def _event_for(self, kind: str, raw: dict[str, Any]) -> Event | None:
        if self.resource.served_group:
            raw["apiVersion"] = self.resource.api_version  # known by its own group (module doc)
        raw.setdefault("apiVersion", self.resource.api_version)
        raw.setdefault("kind", self.resource.kind)
        try:
            obj = trim(raw)
        except msgspec.ValidationError as exc:
            meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
            log.error("malformed object from the API; skipped", resource=self.resource.plural,
                      key=f"{meta.get('namespace', '')}/{meta.get('name', '?')}", error=str(exc))
            return None
        if self.on_object is not None:
            self.on_object(obj, kind == "DELETED")
        if kind == "DELETED":
            return ObjectDeleted(obj=obj, cluster=self.cluster)
        return ObjectObserved(obj=obj, cluster=self.cluster)

    async def relist(self, *, announce: bool = True) -> None:
        """List the resource into the log. With ``announce``, a :class:`ListsStarted` naming this source goes
        first, so nothing is decided until the list has ended; the daemon announces its first lists all at once
        (``announce=False`` here) because the world is incomplete until every one of them has ended."""
        try:
            items, rv = await self.kube.list(self.resource, namespace=self.namespace,
                                             field_selector=self.field_selector)
        except KubeError as exc:
            if exc.status != 404 or not self.absent_ok:
                raise
            await self._listed_absent()
            return
        if self.absent:
            self.absent = False
            log.info("resource served now; listed and watched", resource=self.name, path=self.resource.path())
        events: list[Event] = [ListsStarted(sources=(self.list_source,), cluster=self.cluster)] if announce else []
        keys: list[str] = []
        for raw in items:
            event = self._event_for("ADDED", raw)
            if event is not None:
                events.append(event)
                keys.append(event_key(event))
            if len(events) >= self.batch_size:
                await self._append(events)
                events = []
        events.append(ObjectsListed(kind=self.resource.kind, keys=tuple(sorted(keys)), namespace=self.namespace,
                                    cluster=self.cluster))
        await self._append(events)
        self.resource_version = rv
        self.relists += 1
        self.synced.set()

    async def _listed_absent(self) -> None:
        """The server does not serve the (optional) resource: list it as empty, once per absence (module doc)."""
        if not self.absent:
            self.absent = True
            log.warning("resource not served (its CRD is not installed?): listed as empty, asking again periodically",
                        resource=self.name, path=self.resource.path(), retry_every=self.absent_retry)
            await self._append([ObjectsListed(kind=self.resource.kind, keys=(), namespace=self.namespace,
                                              cluster=self.cluster)])
        self.resource_version = ""
        self.synced.set()

    async def _flush(self) -> None:
        async with self._lock:  # one append at a time keeps the log in stream order
            pending, self._pending = self._pending, []
            await self._append(pending)

    async def _flush_soon(self) -> None:
        await asyncio.sleep(self.flush_interval)
        # events queued while an append was running have no flusher of their own (this task was not done
        # yet when they came): keep flushing until nothing is pending, or they would wait for the next event
        while self._pending:
            await self._flush()

    def _queue(self, event: Event) -> None:
        self._pending.append(event)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon())

    async def _watch_once(self) -> None:
        stream = self.kube.watch(self.resource, resource_version=self.resource_version, namespace=self.namespace,
                                 field_selector=self.field_selector, timeout_seconds=self.timeout_seconds)
        try:
            async for item in stream:
                kind = item.get("type")
                obj = item.get("object") or {}
                if kind == "ERROR":
                    raise KubeError(int(obj.get("code") or 500), str(obj.get("reason", "Error")),
                                    str(obj.get("message", "")))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    event = self._event_for(str(kind), obj)
                    if event is not None:
                        self._queue(event)
                    if len(self._pending) >= self.batch_size:
                        await self._flush()
                if rv:
                    self.resource_version = rv
        finally:
            await self._flush()

    async def run(self) -> None:
        """List, then watch forever (until cancelled)."""
        delay = 0.2
        while True:
            wait_at_least = 0.0  # an error's Retry-After
            try:
                if not self.resource_version:
                    await self.relist()
                    if self.absent:
                        await asyncio.sleep(self.absent_retry * random.uniform(0.8, 1.2))
                        continue
                started, version = time.monotonic(), self.resource_version
                await self._watch_once()
                delay = 0.2
                if version != self.resource_version or time.monotonic() - started > 1.0:
                    continue  # the server ended the stream (timeout, restart, LB idle): resume at once
            except asyncio.CancelledError:
                if self._flusher is not None:
                    self._flusher.cancel()
                raise
            except KubeError as exc:
                self.errors += 1
                wait_at_least = min(exc.retry_after or 0.0, 60.0)
                if exc.status == 410:
                    log.info("watch expired; relisting", resource=self.name, resource_version=self.resource_version)
                    self.resource_version = ""
                    continue
                self.last_error = f"{exc.status} {exc.reason}: {exc.message[:200]}"  # (410 is routine, not one)
                if exc.status == 404 and self.absent_ok:
                    # its CRD was deleted? the relist (after the backoff) tells, and warns once if so
                    self.resource_version = ""
                    log.info("watch answered 404; relisting", resource=self.name, message=exc.message[:200],
                             retry_in=round(delay, 2))
                else:
                    log.warning("watch failed; retrying", resource=self.name, status=exc.status, reason=exc.reason,
                                message=exc.message[:200], retry_in=round(delay, 2))
            except Exception as exc:  # a transport error mid-stream, a decoding error…: back off and resume
                self.errors += 1
                self.last_error = repr(exc)[:200]
                log.warning("watch broke; retrying", resource=self.name, error=repr(exc)[:200],
                            retry_in=round(delay, 2))
            await asyncio.sleep(max(wait_at_least, delay * (0.5 + random.random())))
            delay = min(30.0, delay * 2)
