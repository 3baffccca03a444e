"""Competing writers: noticing that someone else writes what tether owns, and saying so.

Two tethers on one control plane without leader election (a rollout, a forgotten local ``tether run``, a split
brain), or Volcano Global's own controller next to tether, write the same fields. What tether writes converges
whoever writes it (docs/operations.md, "Competing writers"), but a second writer is a mistake to fix, not a
state to live in — and a silent one cost a 25 MB log in 20 s before tether converged. So the daemon watches for
it: :class:`CompetingWrites` sees every observation of a claim, DataSource or binding (the watches'
``on_object``) and every answer to its own writes (the executor), and reports a change of **tether's fields**
that it did not make:

* a claim's ``status`` (tether is its controller);
* a DataSource's ``spec``, ``status`` and location annotation (tether creates it and keeps it);
* a binding's annotations under ``tether.dev/`` and ``datadependency.volcano.sh/`` (what tether added, the gate,
  admission's holds) — not its placement, which Karmada's detector rewrites on every policy apply, nor its
  ``spec.clusters``, which is the scheduler's.

**Telling its own writes from another's.** Each observation is compared with the version seen before it, by a
digest of those fields; a change at a resourceVersion one of this process's writes produced is its own. The
watch can deliver a write before the write's answer arrives, so a change seen while a write of that object is in
flight waits for the answer before it is judged. The binding webhook changes bindings inside other writers'
requests (it undoes a revert in the request that made it): a change that follows its patch is its own too.

**Saying so, rate-limited.** Every foreign change counts in ``tether_competing_writes_total{kind}``; at most one
warning log line and one Kubernetes Event (``CompetingWriter``, on the object) per object per ``interval``, and
at most ``burst`` per ``interval`` in all, so a flip-flop at hundreds of writes a second says so without
becoming the next flood. The Event's message does not vary, so repeats count on one Event.

**Objects shared with tethers of other namespaces.** With ``--watch-namespace``, DataSources (cluster-scoped) are
shared with the tethers of other namespaces, which write those their own claims use: such a DataSource is judged
only once this process has written it (``shared_kinds``). Before, every write of another namespace's tether — a
supported set-up, and every other run of the suite on a shared cluster — was taken for a competitor's.

What it cannot see: a write whose answer never came back (a timeout after the server applied it) is taken for
another writer's — one line, once.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from collections.abc import Awaitable, Callable

import msgspec
import structlog

from tether.core.keys import LOCATION_ANNOTATION, TETHER_KEY_PREFIXES
from tether.core.kube import KubeObject, ObjectKey
from tether.projections.versions import stale

log = structlog.get_logger("tether.competing")

#: Annotation prefixes of what tether writes on a binding (exclusions, the gate, admission's holds).
EVENT_REASON = "CompetingWriter"
EVENT_MESSAGE = ("another writer changed fields tether owns on this object; is a second tether running without "
                 "leader election, or another controller (Volcano Global's) managing it?")

_encoder = msgspec.json.Encoder(order="sorted")


def _canonical(raw: msgspec.Raw) -> bytes:
    """The JSON of a raw field with its keys sorted: equal content, equal bytes, whoever serialised it."""
    data = bytes(raw)
    try:
        return _encoder.encode(msgspec.json.decode(data))
    except msgspec.DecodeError:
        return data


def owned_fields(obj: KubeObject) -> bytes | None:
    """The fields tether owns on ``obj``, as bytes (None: tether owns nothing of this kind; module doc)."""
    kind = obj.kind
    if kind == "DataSourceClaim":
        return _canonical(obj.status)
    if kind == "DataSource":
        location = obj.metadata.annotations.get(LOCATION_ANNOTATION, "").encode()
        return location + b"\0" + _canonical(obj.spec) + b"\0" + _canonical(obj.status)
    if kind == "ResourceBinding":
        owned = sorted((k, v) for k, v in obj.metadata.annotations.items() if k.startswith(TETHER_KEY_PREFIXES))
        return _encoder.encode(owned)
    return None


def _digest(fields: bytes) -> bytes:
    return hashlib.blake2b(fields, digest_size=8).digest()


class CompetingWrites:
    """The detector (module doc). ``count(kind)`` is called for every foreign change; ``emit(obj)`` sends the Event
    (awaited in a task of its own; its failure is logged, never raised)."""

    def __init__(self, *, count: Callable[[str], None] = lambda kind: None,
                 emit: Callable[[KubeObject], Awaitable[object]] | None = None, interval: float = 300.0,
                 burst: int = 20, expect_window: float = 30.0, max_objects: int = 200_000,
                 clock: Callable[[], float] = time.monotonic, shared_kinds: frozenset[str] = frozenset()) -> None:
        """``shared_kinds``: kinds whose objects are judged only once this process wrote them (module doc)."""
        self.count = count
        self.shared_kinds = shared_kinds
        self.emit = emit
        self.interval = interval
        self.burst = burst
        self.expect_window = expect_window
        self.max_objects = max_objects
        self.clock = clock
        self.seen: dict[ObjectKey, tuple[str, bytes]] = {}  # key → (resourceVersion, digest of tether's fields)
        self.own: dict[ObjectKey, deque[str]] = {}  # key → resourceVersions this process's writes produced
        self.inflight: dict[ObjectKey, int] = {}  # key → writes of it under way
        self.waiting: dict[ObjectKey, list[KubeObject]] = {}  # changes seen while a write was under way
        self.expected: dict[ObjectKey, float] = {}  # key → until when a change is the webhook's own
        self.reported: dict[ObjectKey, float] = {}  # key → when it was last reported
        self.recent: deque[float] = deque()  # when the last reports were made (the burst limit)
        self.foreign = 0  # foreign changes seen (all of them, reported or not)
        self._tasks: set[asyncio.Task[object]] = set()

    # --- what this process writes ----------------------------------------------------------------------------

    def writing(self, key: ObjectKey) -> None:
        """A write of ``key`` starts (the executor)."""
        self.inflight[key] = self.inflight.get(key, 0) + 1

    def wrote(self, key: ObjectKey, result: KubeObject | None) -> None:
        """A write of ``key`` ended, with the object the API returned for it (None: it wrote nothing — failed, or
        found nothing to do, when the object it read is someone else's version)."""
        if result is not None and result.key == key:
            rv = result.metadata.resource_version
            own = self.own.get(key)
            if own is None:
                own = self.own[key] = deque(maxlen=8)
            own.append(rv)
            fields = owned_fields(result)
            if fields is not None:
                self._remember(key, rv, _digest(fields))
        left = self.inflight.get(key, 1) - 1
        if left > 0:
            self.inflight[key] = left
            return
        self.inflight.pop(key, None)
        for obj in self.waiting.pop(key, ()):
            if obj.metadata.resource_version not in self.own.get(key, ()):
                self._foreign(obj)

    def expect(self, key: ObjectKey) -> None:
        """The binding webhook patched a request on ``key``: the change it makes is this process's own."""
        self.expected[key] = self.clock() + self.expect_window

    # --- what the watches see --------------------------------------------------------------------------------

    def observed(self, obj: KubeObject, deleted: bool = False) -> None:
        """An observation (the signature of ``WatchSource(on_object=...)``)."""
        key = obj.key
        if deleted:
            for held in (self.seen, self.own, self.waiting, self.expected, self.reported):
                held.pop(key, None)
            return
        fields = owned_fields(obj)
        if fields is None:
            return
        if obj.kind in self.shared_kinds and key not in self.own and key not in self.inflight:
            return  # another namespace's tether's, until this process writes it (module doc)
        rv = obj.metadata.resource_version
        previous = self.seen.get(key)
        if previous is not None and stale(rv, previous[0]):
            return  # an echo, or older than what was seen
        digest = _digest(fields)
        self._remember(key, rv, digest)
        if previous is None or previous[1] == digest or rv in self.own.get(key, ()):
            return
        if key in self.inflight:
            self.waiting.setdefault(key, []).append(obj)
            return
        until = self.expected.pop(key, None)
        if until is not None and until >= self.clock():
            return
        self._foreign(obj)

    # --- internals -------------------------------------------------------------------------------------------

    def _remember(self, key: ObjectKey, rv: str, digest: bytes) -> None:
        held = self.seen.pop(key, None)
        if held is not None and stale(rv, held[0]):
            rv, digest = held
        self.seen[key] = (rv, digest)  # (re-inserted: the dict's order is the order of last sight)
        if len(self.seen) > self.max_objects:
            oldest = next(iter(self.seen))
            del self.seen[oldest]
            self.own.pop(oldest, None)

    def _foreign(self, obj: KubeObject) -> None:
        self.foreign += 1
        self.count(obj.kind)
        now = self.clock()
        key = obj.key
        last = self.reported.get(key)
        if last is not None and now - last < self.interval:
            return
        while self.recent and now - self.recent[0] >= self.interval:
            self.recent.popleft()
        if len(self.recent) >= self.burst:
            return
        self.recent.append(now)
        self.reported[key] = now
        log.warning("another writer changed what tether owns", key=key,
                    resource_version=obj.metadata.resource_version,
                    hint="a second tether without leader election, or another controller managing this object; "
                         "tether_competing_writes_total counts every such change")
        if self.emit is not None:
            task: asyncio.Task[object] = asyncio.ensure_future(self._emit(obj))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _emit(self, obj: KubeObject) -> object:
        assert self.emit is not None
        try:
            return await self.emit(obj)
        except Exception as exc:  # an Event is a courtesy: the log line and the metric already said it
            log.debug("could not record the competing-writer Event", key=obj.key, error=repr(exc)[:200])
            return None

    async def aclose(self) -> None:
        """Wait for the Events under way (on shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["EVENT_MESSAGE", "EVENT_REASON", "CompetingWrites", "owned_fields"]
