"""Fault injection: make the emulator fail the way real apiservers and networks do.

Rules are matched per request on ``verb`` (get, list, watch, create, update, patch, delete), ``resource`` (the
plural, optionally ``plural/subresource``), ``namespace`` and ``name``; each fires ``times`` times (``None`` =
forever), on every matching request or, with ``probability`` below 1, on that share of them (drawn from a random
source seeded with ``seed``: a run is repeatable). A rule either answers an error (409 Conflict, 500, 429 with
``Retry-After``, any code) or adds latency before the request is served (a slow API server). ``drop_watches``
ends open watch streams cleanly, as an apiserver restart or a load balancer idle timeout would; clients must
re-watch from their last resourceVersion. ``expire_watches`` does that and also forgets the watch history, as
an apiserver whose watch cache was compacted does: every client that resumes from the version it had gets
``410 Gone`` and must list again.

Every request is counted per object (:attr:`Faults.requests`, ``(verb, resource[/subresource], namespace,
name)``), so a test can show that a client's writes to an object under a fault stay bounded (no write repeats
for ever), not only that they succeed in the end.

The same operations are exposed over HTTP at ``POST /_emulator/faults`` (JSON body ``{"action": "fail" |
"latency" | "drop_watches" | "expire_watches" | "clear", ...keyword arguments}``) and the counts at ``GET
/_emulator/requests``, for out-of-process tests, the chaos scripts (``ops/chaos/``) and the demo.
"""

from __future__ import annotations

import asyncio
import collections
import collections.abc
import random
from dataclasses import dataclass, field

from .errors import ApiError
from .watch import WatchHub

_WRITES = frozenset({"create", "update", "patch", "delete"})
_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
            422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            504: "Timeout"}


@dataclass
class FaultRule:
    code: int | None = None
    latency: float = 0.0
    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    times: int | None = 1
    retry_after: int | None = None
    message: str | None = None
    probability: float = 1.0
    fired: int = field(default=0)
    in_flight: int = field(default=0)  # requests held by this rule's latency right now

    def matches(self, verb: str, resource: str, subresource: str | None, namespace: str, name: str) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        if self.verb is not None and self.verb != verb:
            return False
        if self.resource is not None:
            full = f"{resource}/{subresource}" if subresource else resource
            if self.resource not in (resource, full):
                return False
        if self.namespace is not None and self.namespace != namespace:
            return False
        return self.name is None or self.name == name


class Faults:
    def __init__(self, *, hub: WatchHub, compact: collections.abc.Callable[[], int] = lambda: 0) -> None:
        self._hub = hub
        self._compact = compact
        self.rules: list[FaultRule] = []
        self.log: collections.deque[tuple[str, str, str, str]] = collections.deque(maxlen=10_000)
        self.requests: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        self.random = random.Random()

    def seed(self, seed: int | None) -> None:
        """Seed the draws of the rules' ``probability`` (a chaos run prints its seed and can be repeated)."""
        self.random.seed(seed)

    def fail(
        self, *, code: int, verb: str | None = None, resource: str | None = None, namespace: str | None = None,
        name: str | None = None, times: int | None = 1, retry_after: int | None = None, message: str | None = None,
        probability: float = 1.0,
    ) -> FaultRule:
        rule = FaultRule(code=code, verb=verb, resource=resource, namespace=namespace, name=name, times=times,
                         retry_after=retry_after, message=message, probability=probability)
        self.rules.append(rule)
        return rule

    def add_latency(
        self, seconds: float, *, verb: str | None = None, resource: str | None = None,
        namespace: str | None = None, name: str | None = None, times: int | None = None, probability: float = 1.0,
    ) -> FaultRule:
        rule = FaultRule(latency=seconds, verb=verb, resource=resource, namespace=namespace, name=name, times=times,
                         probability=probability)
        self.rules.append(rule)
        return rule

    def expire_watches(self) -> int:
        """Forget the watch history and end every watch: each client resuming from any version it had gets 410 Gone
        (module doc). The resourceVersion moves on by one, as a compaction past the newest write: a list answers the
        new one, from which a watch resumes normally."""
        self._hub.history.clear()
        self._hub.evicted_rv = self._compact()
        return self._hub.drop()

    def writes(self, *, resource: str | None = None, namespace: str | None = None
               ) -> collections.Counter[tuple[str, str, str]]:
        """Write requests (create, update, patch, delete) served or refused, per object ``(resource, namespace,
        name)``: a fault's retries included."""
        out: collections.Counter[tuple[str, str, str]] = collections.Counter()
        for (verb, res, ns, name), n in self.requests.items():
            if verb in _WRITES and (resource is None or res == resource) and (namespace is None or ns == namespace):
                out[(res, ns, name)] += n
        return out

    def drop_watches(self, *, resource: str | None = None, group: str | None = None) -> int:
        if resource is None:
            return self._hub.drop()
        keys = [k for k in list(self._hub.watchers) if k[1] == resource and (group is None or k[0] == group)]
        return sum(self._hub.drop(key=k) for k in keys)

    def clear(self) -> None:
        self.rules.clear()

    async def before(self, *, verb: str, resource: str, subresource: str | None, namespace: str, name: str) -> None:
        entry = (verb, f"{resource}/{subresource}" if subresource else resource, namespace, name)
        self.log.append(entry)
        self.requests[entry] += 1
        for rule in list(self.rules):
            if not rule.matches(verb, resource, subresource, namespace, name):
                continue
            if rule.probability < 1.0 and self.random.random() >= rule.probability:
                continue
            rule.fired += 1
            if rule.latency:
                rule.in_flight += 1
                try:
                    await asyncio.sleep(rule.latency)
                finally:
                    rule.in_flight -= 1
            if rule.code is not None:
                raise _error(rule, resource, name)

    def count(self, *, verb: str | None = None, resource: str | None = None) -> int:
        """How many requests were seen (handy to assert a client retried or did not)."""
        return sum(1 for v, r, _, _ in self.log if (verb is None or v == verb) and (resource is None or r == resource))


def _error(rule: FaultRule, resource: str, name: str) -> ApiError:
    code = rule.code or 500
    reason = _REASONS.get(code, "Unknown")
    if rule.message:
        message = rule.message
    elif code == 409:
        message = (f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; please '
                   "apply your changes to the latest version and try again")
    elif code == 429:
        message = "Too many requests, please try again later."
    elif code == 500:
        message = "Internal error occurred: injected fault"
    else:
        message = f"injected fault ({code})"
    details: dict[str, object] = {"name": name, "kind": resource}
    headers: dict[str, str] = {}
    if rule.retry_after is not None:
        details["retryAfterSeconds"] = rule.retry_after
        headers["Retry-After"] = str(rule.retry_after)
    return ApiError(code=code, reason=reason, message=message, details=details, headers=headers)
