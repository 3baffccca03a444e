"""Watch fan-out: one bounded history buffer, one queue per watcher.

Every committed change becomes one :class:`Event` appended to a single ``deque`` (the "watch cache"; its size is
configurable and bounds how far back a client may resume) and offered to the watchers registered for that
resource. Watchers are indexed by resource, so a write costs O(watchers of that resource) and never O(objects).
Each watcher filters (namespace, label and field selectors) when the event is offered, and keeps the apiserver's
selector semantics: an object that stops matching is delivered as ``DELETED``, one that starts matching as
``ADDED``. Serialised JSON is cached on the event per apiVersion so ten watchers cost one encode.

Resuming from a resourceVersion older than the oldest retained event is ``410 Gone``; the HTTP layer sends it the
way a real apiserver does for watches: a ``200`` stream whose first (and only) event is ``ERROR`` carrying a
``Status`` with code 410 (kubernetes-asyncio turns that into ``ApiException(status=410)``).

A watcher whose queue overflows (a client that stopped reading) is closed, like the apiserver closes slow
watchers; the client sees the stream end and re-watches.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import gone

ResourceKey = tuple[str, str]  # (group, plural)
Matcher = Callable[[Mapping[str, Any]], bool]


@dataclass(slots=True, eq=False)
class Event:
    rv: int
    key: ResourceKey
    namespace: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    prev: dict[str, Any] | None = None
    encoded: dict[str, bytes] = field(default_factory=dict)


class Watcher:
    """One client's view of the stream. ``queue`` yields ``(type, obj, event)`` tuples or ``None`` (closed)."""

    def __init__(
        self,
        *,
        hub: WatchHub,
        key: ResourceKey,
        namespace: str | None,
        label_match: Matcher | None,
        field_match: Matcher | None,
        maxsize: int,
    ) -> None:
        self.hub = hub
        self.key = key
        self.namespace = namespace
        self.label_match = label_match
        self.field_match = field_match
        self.queue: asyncio.Queue[tuple[str, dict[str, Any], Event | None] | None] = asyncio.Queue()
        self.maxsize = maxsize
        self.closed = False

    def _matches(self, obj: Mapping[str, Any]) -> bool:
        if self.label_match is not None and not self.label_match(obj):
            return False
        return self.field_match is None or self.field_match(obj)

    def offer(self, ev: Event) -> None:
        if self.closed or (self.namespace is not None and ev.namespace != self.namespace):
            return
        if self.label_match is None and self.field_match is None:
            self._put((ev.type, ev.obj, ev))
            return
        now = self._matches(ev.obj)
        if ev.type != "MODIFIED":
            if now:
                self._put((ev.type, ev.obj, ev))
            return
        before = ev.prev is not None and self._matches(ev.prev)
        if now and before:
            self._put(("MODIFIED", ev.obj, ev))
        elif now:
            self._put(("ADDED", ev.obj, None))
        elif before:
            self._put(("DELETED", ev.obj, None))

    def _put(self, item: tuple[str, dict[str, Any], Event | None]) -> None:
        if self.queue.qsize() >= self.maxsize:
            self.close()
            return
        self.queue.put_nowait(item)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)
            self.hub.unsubscribe(self)


class WatchHub:
    def __init__(self, *, history_size: int = 10_000, watcher_queue_size: int = 100_000) -> None:
        self.history: collections.deque[Event] = collections.deque(maxlen=history_size)
        self.evicted_rv = 0  # highest resourceVersion that fell out of the history
        self.watchers: dict[ResourceKey, set[Watcher]] = collections.defaultdict(set)
        self.watcher_queue_size = watcher_queue_size
        self.events_published = 0

    def publish(self, ev: Event) -> None:
        if len(self.history) == self.history.maxlen:
            self.evicted_rv = self.history[0].rv
        self.history.append(ev)
        self.events_published += 1
        for w in tuple(self.watchers.get(ev.key, ())):
            w.offer(ev)

    def subscribe(
        self,
        *,
        key: ResourceKey,
        namespace: str | None = None,
        label_match: Matcher | None = None,
        field_match: Matcher | None = None,
        since_rv: int | None = None,
        current_rv: int = 0,
    ) -> Watcher:
        """Register a watcher; with ``since_rv`` replay retained events after it (or raise 410 Gone)."""
        w = Watcher(
            hub=self,
            key=key,
            namespace=namespace,
            label_match=label_match,
            field_match=field_match,
            maxsize=self.watcher_queue_size,
        )
        if since_rv is not None:
            if since_rv < self.evicted_rv:
                raise gone(f"too old resource version: {since_rv} ({self.evicted_rv + 1})")
            if since_rv < current_rv:
                for ev in self.history:
                    if ev.rv > since_rv and ev.key == key:
                        w.offer(ev)
        self.watchers[key].add(w)
        return w

    def unsubscribe(self, w: Watcher) -> None:
        self.watchers.get(w.key, set()).discard(w)

    def drop(self, *, key: ResourceKey | None = None) -> int:
        """Close watch streams (all, or one resource's); returns how many were closed."""
        victims = [w for k, ws in self.watchers.items() if key is None or k == key for w in ws]
        for w in victims:
            w.close()
        return len(victims)
