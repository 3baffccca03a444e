"""One decision pass of the data-dependency decider: what both halves of its rules read and share.

A pass lives for one call of ``decider.decide``. It holds the world it reads and the decisions it emits, and caches
what more than one rule asks — which DataSource serves a claim (:meth:`PassBase.source_for`), the live DataSources of
an identity — so that each is computed once. The world does not change while a pass runs (commands are only noted as
issued afterwards, by ``projections.step.step``), so a value computed from it cannot go stale within the pass.

The rules come in two halves, each a class over this one: the bindings' placement (``binding_placement``: where a
workload may run, from its claims' data) and, extending it, the claims and DataSources with the catalog side
(``decider.DecisionPass``).
"""

from __future__ import annotations

from ..commands import Command, CreateDataSource, command_id, command_name, command_target
from ..decision import Decision
from ..envelope import EventRecord, rfc3339
from ..identity import DataIdentity
from ..plugin_config import PluginConfig
from ..world import Lookup, World
from ..world.views import Claim, Source

DECIDER = "data-dependency"


def creation(name: str, identity: DataIdentity, lookup: Lookup, plugin: PluginConfig,
             clusters: tuple[str, ...]) -> CreateDataSource:
    """The DataSource a resolved lookup creates (``DecisionPass.resolve`` issues it; ``BindingPlacement.anticipated``
    checks it was not refused)."""
    return CreateDataSource(name=name, identity=identity, cluster_names=clusters, location=lookup.location,
                            reclaim_policy=plugin.reclaim_policy)


class PassBase:
    """The state of one decision pass (module doc) and the reads both halves of the rules share."""

    #: Whether to take the shortcuts whose plain computation the tests compare them with
    #: (``tests/decider/test_memos.py``): the commands memoised on a view and dropping, before its reason is
    #: built, a decision whose very command is in flight (``step`` would drop it).
    shortcuts = True

    def __init__(self, world: World, record: EventRecord) -> None:
        self.world = world
        self.at_ms = record.at_ms
        self.out: list[Decision] = []
        self.live: dict[str, list[str]] = {}
        self.chosen: dict[str, Source | None] = {}  # claim key → its data source (source_for)
        self._now = ""

    @property
    def now(self) -> str:
        """The event's time as RFC 3339 (formatted only when a decision needs it)."""
        now = self._now
        if not now:
            now = self._now = rfc3339(self.at_ms)
        return now

    def emit(self, command: Command, reason: str, cid: str = "", target: str = "", at: str = "") -> None:
        """Decide ``command``; its id, target and slot are computed here once (or given, when the caller has
        them) and carried to ``step`` in the :class:`Decision`."""
        if not cid:
            cid = command_id(command)
            target = command_target(command)
            at = f"{command_name(command)}:{target}"  # slot(), inlined
        world = self.world
        if world.rejected and cid in world.rejected:
            return  # the API refused exactly this request for good; a different request may still go
        if world.retry_wait and at in world.retry_wait:
            return  # the last attempt failed; the retry timer will bring this object back
        self.out.append(Decision(command=command, reason=reason, decider=DECIDER, id=cid, key=target, slot=at))


    def live_sources(self, identity_key: str) -> list[str]:
        """The non-deleting DataSources caching an identity, sorted (computed once per decision)."""
        live = self.live.get(identity_key)
        if live is None:
            names = self.world.sources_by_identity.get(identity_key)
            sources = self.world.sources
            if not names:
                live = []
            elif len(names) == 1:  # the common case: one DataSource per identity
                live = [n for n in names if not sources[n].deleting]
            else:
                live = sorted(n for n in names if not sources[n].deleting)
            self.live[identity_key] = live
        return live

    def source_for(self, key: str, claim: Claim) -> Source | None:
        """The DataSource the claim stored under ``key`` is bound to (computed once per claim per decision)."""
        chosen = self.chosen
        if key in chosen:
            return chosen[key]
        source = None
        if not claim.deleting and claim.identity is not None:
            live = self.live_sources(claim.identity.key)
            if live:
                name = claim.bound_data_source if len(live) > 1 and claim.bound_data_source in live else live[0]
                source = self.world.sources[name]
        chosen[key] = source
        return source


__all__ = ["DECIDER", "PassBase", "creation"]
