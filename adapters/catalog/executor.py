"""The catalog executor: serves :class:`~tether.core.commands.LookupDataLocation` commands.

The lookup's answer is returned as an event (resolved, not in the catalog, or failed) for the decider to fold;
nothing here decides which clusters the data maps to, so history can be re-decided under another mapping.
"""

from __future__ import annotations

from typing import Any

from tether.adapters.daemon.metrics import Metrics
from tether.core.commands import Command, LookupDataLocation
from tether.core.envelope import CommandRecord
from tether.core.events import DataLocationLookupFailed, DataLocationResolved, DataSourceNotInCatalog, Event


class CatalogExecutor:
    """Serves :class:`LookupDataLocation` with a resolver set (a
    :class:`~tether.adapters.catalog.registry.ResolverSet`)."""

    def __init__(self, resolvers: Any, *, metrics: Metrics | None = None) -> None:
        self.resolvers = resolvers
        self.metrics = metrics

    def handles(self, command: Command) -> bool:
        return isinstance(command, LookupDataLocation)

    async def apply(self, record: CommandRecord) -> list[Event]:
        command = record.command
        assert isinstance(command, LookupDataLocation)
        outcome = await self.resolvers.resolve(command.identity, trigger="lookup")
        if self.metrics is not None:
            kind = {DataLocationResolved: "resolved", DataSourceNotInCatalog: "not-found",
                    DataLocationLookupFailed: "failed"}.get(type(outcome), "other")
            self.metrics.lookups.labels(command.identity.system, kind).inc()
        return [outcome]
