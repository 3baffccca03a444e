"""What the world keeps of admission checks: each queue's checks and their policies (:class:`ChecksConfig`).

A queue of the admission ConfigMap may name checks a binding must pass before its queue admits it — as Kueue's
admission checks gate a workload — each with a timeout and a retry policy (``core.admission.checks`` parses them and
decides the checks; docs/admission-checks.md). The world holds the parsed configuration (``AdmissionState``) and, per
binding, its checks as last decided (``AdmissionState.checks``, the :class:`~tether.core.commands.CheckStatus` of a
``SetAdmissionChecks``, noted when it is issued), so the type is language.
"""

from __future__ import annotations

import msgspec

PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
STATES = (PENDING, READY, RETRY, REJECTED)
DATA_BOUND, DATA_LOADED = "data-bound", "data-loaded"
CHECKS = (DATA_BOUND, DATA_LOADED)
#: The timer that ends a check's Pending attempt (its timeout) or its Retry backoff.
CHECK_PURPOSE = "admission-check"


class CheckPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """One check a queue names: ``timeout_ms`` — how long an attempt may stay Pending before it counts as failed
    (0: as long as it takes); ``retry_limit`` — failures retried before the check is Rejected; ``backoff_ms``
    doubling up to ``max_backoff_ms`` — the wait between a failure and the next attempt."""

    name: str
    timeout_ms: int = 0
    retry_limit: int = 3
    backoff_ms: int = 10_000
    max_backoff_ms: int = 300_000

    def backoff(self, attempt: int) -> int:
        """The wait after the ``attempt``-th failure."""
        return min(self.max_backoff_ms, self.backoff_ms << max(0, min(attempt - 1, 30)))


class ChecksConfig(msgspec.Struct, frozen=True):
    """Queue name → the checks its bindings must pass, in the order they are listed."""

    queues: dict[str, tuple[CheckPolicy, ...]] = {}


NO_CHECKS = ChecksConfig()

__all__ = ["CHECKS", "CHECK_PURPOSE", "DATA_BOUND", "DATA_LOADED", "NO_CHECKS", "PENDING", "READY", "REJECTED",
           "RETRY", "STATES", "CheckPolicy", "ChecksConfig"]
