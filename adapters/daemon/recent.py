"""The last decisions and errors of a running daemon, for ``GET /status`` (``adapters/daemon/status.py``).

The log holds every decision and every outcome, but finding "the last few" there means reading backwards through streams
that may be partitioned (Kafka) — and a status request must stay cheap and never touch the log's consumers. So the
decider and executor loops hand each batch of decided commands, and each command's outcome, to :class:`Recent`, which
keeps the last :data:`KEEP` of each, already in the JSON shape of the status document. Memory is bounded; nothing here
is durable (a restart starts empty — the log is the history, this is a window on it).

An *error* is an outcome that did not do what was decided: a command that failed (the API refused it, the
executor raised), a catalog lookup that gave no answer, a table the catalog does not have.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from tether.core.commands import StartTimer
from tether.core.envelope import CommandRecord, rfc3339
from tether.core.events import CommandFailed, DataLocationLookupFailed, DataSourceNotInCatalog, Event

#: How many decisions and errors are kept.
KEEP = 20


class Recent:
    """The last :data:`KEEP` decisions and errors (module doc), newest last."""

    def __init__(self, *, keep: int = KEEP) -> None:
        self.decisions: deque[dict[str, Any]] = deque(maxlen=keep)
        self.errors: deque[dict[str, Any]] = deque(maxlen=keep)

    def decided(self, records: Sequence[CommandRecord]) -> None:
        for record in records:
            if isinstance(record.command, StartTimer):  # bookkeeping (retries, admission cycles), not a decision
                continue
            self.decisions.append({
                "at": rfc3339(record.at_ms), "command": type(record.command).__name__, "key": record.key,
                "reason": record.reason, "decider": record.decider, "id": record.id, "causation": record.causation})

    def applied(self, record: CommandRecord, events: Sequence[Event], *, at_ms: int) -> None:
        for event in events:
            entry: dict[str, Any] | None = None
            if isinstance(event, CommandFailed):
                entry = {"source": "executor", "key": event.target, "what": type(record.command).__name__,
                         "reason": event.reason, "message": event.message, "retryable": event.retryable}
            elif isinstance(event, DataLocationLookupFailed):
                entry = {"source": "catalog", "key": event.identity.key, "what": "lookup",
                         "reason": "LookupFailed", "message": event.message, "retryable": event.retryable}
            elif isinstance(event, DataSourceNotInCatalog):
                entry = {"source": "catalog", "key": event.identity.key, "what": "lookup",
                         "reason": "NotInCatalog", "message": event.message, "retryable": False}
            if entry is not None:
                self.errors.append({"at": rfc3339(at_ms), **entry, "command_id": record.id})
