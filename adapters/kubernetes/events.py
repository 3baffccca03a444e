"""Kubernetes Events as client-go's recorder writes them: correlated, aggregated, and limited per object.

An Event is a write on the API server every controller shares, delivered to every watcher of Events. tether
decides few (``core.admission.binding_events`` and the claims' warnings say which), and writes those the way
client-go's ``EventCorrelator`` does, with its defaults:

* **a repeat is a count**: an Event identical to one this process wrote (object, type, reason, message) is one PATCH
  of ``count`` and ``lastTimestamp`` on that Event, read from memory (an LRU of the last 4,096), never a second
  Event and never a read first. After a restart the first repeat finds the Event by its name (``409`` on create)
  and counts from what the server holds;
* **similar Events are aggregated**: past 10 Events of one object with the same type and reason but different
  messages within 10 minutes, the next ones are one Event, ``(combined from similar events): <latest message>``,
  counted like a repeat;
* **a flood is cut**: each object has a bucket of 25 Events refilled at one per 5 minutes; an Event with no token
  left is not written (``tether_events_dropped_total``; the decision stays in the log and in
  ``tether replay --explain``, which is where every decision is anyway).

Names are derived from what an Event says (object, reason, message; or object, type and reason for an aggregate), so
two processes — a restart, a takeover — count on the same Event.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tether.core.commands import EmitKubernetesEvent

from .client import EVENTS, KubeClient, KubeError

MAX_CACHED = 4096  # client-go: maxLruCacheEntries
AGGREGATE_AFTER = 10  # client-go: defaultAggregateMaxEvents
AGGREGATE_WINDOW = 600.0  # seconds; client-go: defaultAggregateIntervalInSeconds
SPAM_BURST = 25  # client-go: defaultSpamBurst
SPAM_REFILL = 300.0  # seconds per token; client-go: defaultSpamQPS = 1/300
COMBINED = "(combined from similar events): "


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


class _Lru(OrderedDict[str, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: str, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


class EventRecorder:
    """Writes :class:`EmitKubernetesEvent` commands as Events (module doc). ``clock``: monotonic seconds, for the
    windows and buckets; ``now``: the timestamps written."""

    def __init__(self, kube: KubeClient, *, component: str = "tether", clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 on_drop: Callable[[], None] = lambda: None) -> None:
        self.kube = kube
        self.component = component
        self.clock = clock
        self.now = now
        self.counts: _Lru = _Lru(MAX_CACHED)  # Event name → count written
        self.similar: _Lru = _Lru(MAX_CACHED)  # object|type|reason → deque of (time, message digest)
        self.buckets: _Lru = _Lru(MAX_CACHED)  # object → (tokens, when last refilled)
        self.dropped = 0
        self.on_drop = on_drop  # told of each Event not written (the daemon counts tether_events_dropped_total)

    def _take_token(self, key: str) -> bool:
        tokens, at = self.buckets.get(key, (float(SPAM_BURST), self.clock()))
        now = self.clock()
        tokens = min(float(SPAM_BURST), tokens + (now - at) / SPAM_REFILL)
        if tokens < 1.0:
            self.buckets.put(key, (tokens, now))
            return False
        self.buckets.put(key, (tokens - 1.0, now))
        return True

    def _aggregate(self, c: EmitKubernetesEvent) -> tuple[str, str]:
        """The Event's name and message once similar ones are aggregated."""
        ref = c.involved
        similar_key = f"{ref.key}|{c.event_type}|{c.reason}"
        seen: deque[tuple[float, str]] = self.similar.get(similar_key) or deque()
        now, digest = self.clock(), _digest(c.message)
        while seen and now - seen[0][0] > AGGREGATE_WINDOW:
            seen.popleft()
        if digest not in {d for _, d in seen}:
            seen.append((now, digest))
        self.similar.put(similar_key, seen)
        if len(seen) > AGGREGATE_AFTER:
            return f"{ref.name}.{_digest(similar_key + '|combined')}", COMBINED + c.message
        return f"{ref.name}.{_digest(f'{ref.key}|{c.reason}|{c.message}')}", c.message

    async def record(self, c: EmitKubernetesEvent) -> bool:
        """Write (or count) the Event; False when the object's bucket is empty and nothing was written."""
        ref = c.involved
        namespace = ref.namespace or "default"
        name, message = self._aggregate(c)
        if not self._take_token(ref.key):
            self.dropped += 1
            self.on_drop()
            return False
        stamp = self.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        count = self.counts.get(name)
        if count is not None and await self._count(name, namespace, count + 1, message, stamp):
            return True
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name,
                               "namespace": ref.namespace, "uid": ref.uid},
            "reason": c.reason, "message": message[:1024], "type": c.event_type,
            "source": {"component": self.component}, "reportingComponent": self.component,
            "reportingInstance": self.component, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            await self.kube.create(EVENTS, event, namespace=namespace)
            self.counts.put(name, 1)
            return True
        except KubeError as exc:
            if exc.status != 409:
                raise
        # on record already (another process of tether wrote it, or this one before a restart): count on it
        current = await self.kube.get(EVENTS, name, namespace=namespace)
        if current is None:
            return False  # expired meanwhile: the next occurrence creates it again
        return await self._count(name, namespace, int(current.get("count") or 1) + 1, message, stamp)

    async def _count(self, name: str, namespace: str, count: int, message: str, stamp: str) -> bool:
        """One PATCH of the count (as client-go's recorder: no resourceVersion, the count is a hint for humans);
        False when the Event is gone (Events expire)."""
        try:
            await self.kube.patch(EVENTS, name, {"count": count, "lastTimestamp": stamp, "message": message[:1024]},
                                  namespace=namespace)
        except KubeError as exc:
            if exc.status == 404:
                self.counts.pop(name, None)
                return False
            raise
        self.counts.put(name, count)
        return True
