"""The world's shape: what the fold fills (``projections/``) and every decider reads.

The world is every event of the log folded into typed, indexed state. Its *shape* — the structs below, the views
of the objects it holds (:mod:`.views`), the member clusters (:mod:`.member_state`), queue admission's state
(:mod:`.admission_state`) and the parsed specs they keep (:mod:`.pod_group`, :mod:`.data_operation`) — is part of
core's shared language: every capability's decider reads it, so it sits below the capability rooms and imports
none of them. *Filling* it is the fold's business: ``projections.fold.evolve`` folds one event into a world in
place, ``projections.replay_fold`` many at once, and nothing in ``core/`` mutates a world.

What is kept:

* typed views of the observed objects tether reads — DataSourceClaims, DataSources, ResourceBindings, Karmada
  Clusters (readiness, and labels and fields: :mod:`.clusters`) — built once per observation (:mod:`.views`);
* the indexes the decider needs to go from one object to the others in O(1): claims by workload and by data
  identity, DataSources by identity, bindings by the workload they bind (``spec.resource``), DataSources
  listing a claim in their ``status.claimRefs``;
* the plugin configuration (location → clusters mapping) parsed from the VG ConfigMap;
* the catalog: the last answer per data identity and the lookups in flight;
* tether's own commands in flight (so an unchanged request is not sent twice), retries waiting for a timer,
  and requests the API rejected for good;
* the member clusters (pod placement) and queue admission's state, each in a struct of its own.
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec

from ..identity import DataIdentity
from ..plugin_config import EMPTY_PLUGINS, PluginSet
from .admission_state import AdmissionState
from .clusters import ClusterPlace
from .member_state import Members
from .views import Binding, Claim, Source

#: An index: a key → the keys of the objects it leads to. Most entries lead to one object (a workload's binding, the
#: DataSources listing a claim), so an entry is a sorted tuple while it has at most :data:`SMALL_INDEX` members — a
#: 1-tuple is 56 bytes where a set of one is 216, which was a seventh of the world's memory (ops/bench/memory.py) —
#: and a set beyond (an identity claimed by thousands), so that adding and removing stay O(1) where they are many.
#: The form is a function of the members (``projections.fold._index_entry``), so two folds of one history hold
#: equal indexes; readers only iterate, test, count and ``sorted`` an entry, which both forms answer alike.
Index = dict[str, Collection[str]]
SMALL_INDEX = 8


class Settings(msgspec.Struct, frozen=True):
    """What the fold needs to know about the installation (from the log: ``SettingsApplied``)."""

    plugin_configmap: str = "volcano-global/volcano-global-datasource-plugins"
    admission_configmap: str = "tether-system/tether-admission"  # plugin tiers and queue-managed kinds


class Lookup(msgspec.Struct):
    """The catalog's latest answer about one identity. kind: resolved | not-found | failed (| expired: a retry is
    due). A resolved location may also come from a DataSource's location changed by a write
    (``projections.fold.adopt_location``)."""

    identity: DataIdentity
    kind: str
    location: str = ""
    message: str = ""
    retryable: bool = True
    trigger: str = "lookup"
    attempt: int = 0
    at_ms: int = 0


class Timer(msgspec.Struct, frozen=True):
    """A timer the decider started and that has not fired yet (re-armed after a restart)."""

    fire_at_ms: int
    purpose: str
    subject: str


class Touched(msgspec.Struct):
    """What one event may have changed: the decider reconciles exactly these (and what follows from them)."""

    claims: set[str] = msgspec.field(default_factory=set)
    sources: set[str] = msgspec.field(default_factory=set)
    bindings: set[str] = msgspec.field(default_factory=set)
    identities: set[str] = msgspec.field(default_factory=set)
    all_bindings: bool = False
    all_claims: bool = False
    members: set[str] = msgspec.field(default_factory=set)  # member keys of PodGroups / Fluid operations



class World(msgspec.Struct):
    settings: Settings = Settings()
    claims: dict[str, Claim] = {}
    sources: dict[str, Source] = {}
    bindings: dict[str, Binding] = {}
    clusters: dict[str, bool] = {}  # Karmada cluster name → Ready
    cluster_places: dict[str, ClusterPlace] = {}  # Karmada cluster name → its labels and fields (clusters.py)
    plugins: PluginSet = EMPTY_PLUGINS
    lookups: dict[str, Lookup] = {}  # identity key → latest answer
    lookups_in_flight: dict[str, int] = {}  # identity key → attempt
    claims_by_workload: Index = {}
    claims_by_identity: Index = {}
    sources_by_identity: Index = {}
    bindings_by_workload: Index = {}
    sources_listing_claim: Index = {}  # claim key → DataSource names whose claimRefs list it
    inflight: dict[str, str] = {}  # command slot → id of the command in flight
    # claim key → the transition its status write in flight carries (UpdateClaimStatus.transition): the decider
    # decides the claim again while it is on its way, and issues a newer status only for another transition
    statuses_in_flight: dict[str, str] = {}
    retry_wait: dict[str, int] = {}  # command slot → attempt, while a retry timer runs
    rejected: dict[str, str] = {}  # command id → why the API rejected it for good
    timers: dict[str, Timer] = {}  # timer id → timer, until it fires
    tombstones: dict[str, str] = {}  # object key → resourceVersion it was deleted at (the latest TOMBSTONES)
    lists_pending: set[str] = set()  # lists started and not ended (ListsStarted): nothing is decided until it is empty
    claims_namespace: str = ""  # the namespace whose claims are watched (from ListsStarted); "" for all of them
    members: Members = msgspec.field(default_factory=Members)  # the member clusters (member_state.py)
    events: int = 0
    last_at_ms: int = 0
    admission: AdmissionState = msgspec.field(default_factory=AdmissionState)  # queue admission (admission_state.py)

    def summary(self) -> dict[str, int]:
        bound = sum(1 for c in self.claims.values() if c.phase == "Bound")
        return {
            "events": self.events,
            "claims": len(self.claims),
            "claims_bound": bound,
            "claims_pending": len(self.claims) - bound,
            "data_sources": len(self.sources),
            "bindings": len(self.bindings),
            "bindings_injected": sum(1 for b in self.bindings.values() if b.injected),
            "clusters": len(self.clusters),
            "lookups_in_flight": len(self.lookups_in_flight),
            "commands_in_flight": len(self.inflight),
        }


def initial_world(settings: Settings | None = None) -> World:
    return World(settings=settings or Settings())


def slot(command: str, target: str) -> str:
    """Commands of one type on one target replace each other; the slot names that pair."""
    return f"{command}:{target}"

__all__ = ["SMALL_INDEX", "Index", "Lookup", "Settings", "Timer", "Touched", "World", "initial_world", "slot"]
