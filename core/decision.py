r"""A decision: a command and why it was decided — what every capability's decider returns.

``projections.step.step`` turns decisions into :class:`~tether.core.envelope.CommandRecord`\ s (dropping those whose
command is already in flight) and ``tether replay --explain`` prints their reasons. The retry backoff lives here
too, because both the data-dependency decider (catalog lookups) and the pipeline (failed commands) retry on it.
"""

from __future__ import annotations

import msgspec

from .commands import Command

#: Lookup retry backoff: 5 s doubling up to 5 min (deterministic: the decider has no randomness; the timer
#: adapter may add jitter when it arms the timer, which does not change the decision).
RETRY_BASE_MS = 5_000
RETRY_MAX_MS = 300_000


class Decision(msgspec.Struct, frozen=True):
    """A command and why it was decided (the reason is what ``tether replay --explain`` prints).

    ``id``, ``key`` and ``slot`` are the command's :func:`~tether.core.commands.command_id`, its
    :func:`~tether.core.commands.command_target` and its in-flight slot, computed once by the decider so that
    ``projections.step.step`` does not compute them again; empty when the decider did not (``step`` then does)."""

    command: Command
    reason: str
    decider: str  # the capability that decided, as --explain names it
    id: str = ""
    key: str = ""
    slot: str = ""


def backoff_ms(attempt: int) -> int:
    """The delay before retry number ``attempt`` (from 1), from the event's time: no randomness, so a replay
    arms the same timers."""
    return int(min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** max(0, attempt - 1)))


__all__ = ["RETRY_BASE_MS", "RETRY_MAX_MS", "Decision", "backoff_ms"]
