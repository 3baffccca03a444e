"""The catalog executor: serves :class:`~tether.core.commands.LookupDataLocation` commands.

The lookup's answer is returned as an event (resolved, not in the catalog, or failed) for the decider to fold;
nothing here decides which clusters the data maps to, so history can be re-decided under another mapping. Each
answer is counted through ``on_lookup`` (the daemon passes its ``tether_catalog_lookups_total`` counter), so the
catalog room imports nothing of the daemon's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.core.commands import Command, LookupDataLocation
from tether.core.envelope import CommandRecord
from tether.core.events import DataLocationLookupFailed, DataLocationResolved, DataSourceNotInCatalog, Event

#: What ``on_lookup`` is told of each answer: the identity's system and the kind of answer.
LookupCounter = Callable[[str, str], None]
_KINDS = {DataLocationResolved: "resolved", DataSourceNotInCatalog: "not-found", DataLocationLookupFailed: "failed"}


class CatalogExecutor:
    """Serves :class:`LookupDataLocation` with a resolver set (a
    :class:`~tether.adapters.catalog.registry.ResolverSet`); ``on_lookup(system, kind)`` is called with each answer
    (kind: resolved, not-found, failed)."""

    def __init__(self, resolvers: Any, *, on_lookup: LookupCounter | None = None) -> None:
        self.resolvers = resolvers
        self.on_lookup = on_lookup

    def handles(self, command: Command) -> bool:
        return isinstance(command, LookupDataLocation)

    async def apply(self, record: CommandRecord) -> list[Event]:
        command = record.command
        assert isinstance(command, LookupDataLocation)
        outcome = await self.resolvers.resolve(command.identity, trigger="lookup")
        if self.on_lookup is not None:
            self.on_lookup(command.identity.system, _KINDS.get(type(outcome), "other"))
        return [outcome]
