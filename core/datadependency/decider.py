"""The data-dependency decider (seed 000): claims → DataSources → ResourceBinding cluster affinity.

Volcano Global implements this as a reconcile loop with a phase-driven state machine (handlePending →
findMatchedDS → dynamicBinding/staticBinding; handleBound → doesDataSourceMatchClaim → injectPlacementAffinity
or handleUnbinding). tether keeps every outcome of that machine and VG's wire format (names, finalizers,
annotations, conditions) but decides **level-triggered**: for every object an event touched, it computes what
the object should look like from the whole world and emits a command only where the observed object differs.
The phase is an *output*, never an input, so there is no sequence of events — claim before workload,
workload before claim, binding reverted by Karmada, DataSource deleted under a bound claim — that leaves the
state machine in a branch it cannot leave.

The rules, per object:

* **Claim** — no finalizer of tether's (a claim deleted while tether is down is missing from the next list, and the
  fold forgets it as a watched deletion would: ``tests/integration/test_claim_finalizer.py``; one that carries
  Volcano Global's, written by VG or an earlier tether, is released once no DataSource lists it). Its data source
  is the non-deleting DataSource with the same identity (system, type, name, attributes), preferring the one it is
  already bound to. With one, the claim is ``Bound`` to it; without, it is ``Pending`` and the reason says why: the
  spec is invalid, the system has no plugin, a lookup is running / failed / found nothing, the location maps to no
  cluster, the old DataSource is still being deleted. A claim that was Bound and lost its data source says
  ``BindingInvalid`` (VG's reason). Conditions carry the claim's generation; a Warning Event marks a transition to a
  reason that needs someone's attention (the rest is the status and the log: the shared API server is not written to
  for it). A claim is decided again while its status write is on its way, and another status is issued only for
  another transition (``World.statuses_in_flight``): the executor defers the write and sends the latest only.
* **Lookup** — one per identity, never two in flight, however many claims ask (the world remembers lookups in
  flight; within one decision the identity is resolved once). A resolved location is mapped to clusters with
  the plugin's locationMapping (longest prefix wins) *here*, not in the adapter, so a mapping change is replayable
  and ``--what-if`` can test one. Failures and "not found" are retried on a timer with exponential backoff
  computed from the event time.
* **DataSource** — its ``status.claimRefs`` is exactly the claims bound to it (sorted), ``boundClaims`` their
  count — of the claims this daemon watches: with ``--watch-namespace`` the refs of other namespaces' claims are
  kept as they are (DataSources are cluster-scoped and shared: those claims are another tether's, which would
  otherwise write them back for ever); it carries its finalizer while alive; when deleting, it is released once
  no claim refers to it; with ``reclaimPolicy: Delete`` it is deleted when its last claim went away; when the
  catalog reports a new location (poll or push) its locality follows.
* **ResourceBinding** — tether excludes every known Karmada cluster that does not hold the data of *all* the
  bound claims of the workload (``core.datadependency.exclusions`` explains the exclusion arithmetic); with no bound
  claim, tether's share is stripped. If the binding is already scheduled on a cluster that is now excluded,
  ``spec.rescheduleTriggeredAt`` is set (Karmada's supported trigger) so compute follows data. A placement
  reverted by someone else is simply out of sync and is re-injected. A claim whose DataSource is being created
  (its lookup resolved to a mapped location, the creation not refused for good) counts with the clusters that
  DataSource will have, so a cache miss places the binding in the decision that creates the DataSource rather
  than one trip later; the claim itself stays ``Pending``/``CreatingDataSource`` until the DataSource exists.

Where each rule is: the claims, the lookups and the DataSources here (:class:`DecisionPass`, the pass :func:`decide`
runs); the bindings in ``binding_placement`` (:class:`~.binding_placement.BindingPlacement`, which the pass
extends); what both read — the world, the decisions emitted, which DataSource serves a claim — in ``decision_pass``.
"""

from __future__ import annotations

from operator import attrgetter

import msgspec

from ..commands import (
    DATA_GROUP_VERSION,
    AddFinalizer,
    DeleteDataSource,
    EmitKubernetesEvent,
    LookupDataLocation,
    RemoveFinalizer,
    StartTimer,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    command_id,
    status_transition,
)
from ..decision import Decision, backoff_ms
from ..envelope import EventRecord, rfc3339
from ..identity import DataIdentity, data_source_name
from ..keys import CLAIM_FINALIZER, DATASOURCE_FINALIZER
from ..kube import Condition, ObjectRef, set_condition
from ..plugin_config import map_location
from ..world import Touched, World, slot
from ..world.views import Claim, Source
from .binding_placement import COND_PLACEMENT, INJECTING, SET_BINDING_PLACEMENT, SET_BINDING_TIERS, BindingPlacement
from .decision_pass import DECIDER, creation

BOUND = "Bound"
PENDING = "Pending"
COND_BOUND = "Bound"

#: Bound-condition reasons that need someone's attention: the only ones a claim gets a Kubernetes Event (a Warning)
#: for.
WARNING_REASONS = frozenset({
    "InvalidSpec", "UnknownSystem", "PluginConfigInvalid", "LocationUnmapped", "DataSourceNotFound", "LookupFailed",
    "BindingInvalid", "DataSourceNameConflict", "DataSourceCreateFailed",
})


class _Missing(msgspec.Struct, frozen=True):
    """Why an identity has no DataSource yet (the Bound condition of its claims). ``transient``: a lookup that
    failed in a way asking again may fix (the catalog unavailable, a timeout, its circuit open, a 5xx): retried on
    a timer, and admission holds the workload's new bindings meanwhile (``core.admission.data_hold``)."""

    reason: str
    message: str
    transient: bool = False


#: claimRefs are sorted by (namespace, name) on every decision of a DataSource; attrgetter makes that tuple in C
_by_namespace_name = attrgetter("namespace", "name")


class DecisionPass(BindingPlacement):
    """One decision pass: the claim and DataSource rules and the catalog side (this class), over the binding rules
    (:class:`~.binding_placement.BindingPlacement`) and the pass's shared state (:class:`~.decision_pass.PassBase`).
    Caches per identity, per claim and per binding make each result computed once in the pass."""

    def __init__(self, world: World, record: EventRecord) -> None:
        super().__init__(world, record)
        self.missing: dict[str, _Missing] = {}

    # --- claims -------------------------------------------------------------------------------------------

    def claim(self, key: str) -> None:
        claim = self.world.claims.get(key)
        if claim is None:
            return
        if claim.deleting:
            if CLAIM_FINALIZER in claim.finalizers and not self.world.sources_listing_claim.get(key):
                self.emit(
                    RemoveFinalizer(target=claim.ref, finalizer=CLAIM_FINALIZER),
                    f"claim {key} is being deleted and no DataSource refers to it any more",
                )
            return
        source = self.source_for(key, claim)
        why = self.why_pending(claim) if source is None else None  # drives the lookup, whatever the status
        inflight = self.world.inflight
        if inflight:
            for binding in self.world.bindings_by_workload.get(claim.workload, ()):
                if f"{SET_BINDING_PLACEMENT}:{binding}" in inflight or f"{SET_BINDING_TIERS}:{binding}" in inflight:
                    # the workload's placement is being written: the status waits for that outcome (which touches
                    # the workload's claims), so that Bound and PlacementInjected go out in one write
                    return
        if source is not None:
            phase, bound = BOUND, source.ref.name
            clusters = ",".join(source.cluster_names) or "<none>"
            cond = Condition(type=COND_BOUND, status="True", reason="DataSourceBound",
                             message=f"bound to DataSource {source.ref.name} (clusters: {clusters})",
                             last_transition_time=self.now, observed_generation=claim.generation)
        else:
            assert why is not None
            phase, bound = PENDING, ""
            reason, message = why.reason, why.message
            if claim.phase == BOUND and claim.bound_data_source:
                reason = "BindingInvalid"
                message = f"DataSource {claim.bound_data_source} no longer serves this claim; {why.message}"
            cond = Condition(type=COND_BOUND, status="False", reason=reason, message=message,
                             last_transition_time=self.now, observed_generation=claim.generation)
        conditions = set_condition(claim.conditions, cond)
        placement = self.placement_condition(claim, source)
        if placement is not None:
            if placement.reason == INJECTING and self.placement_underway(claim):
                return  # one status write per transition: Bound and Injected go together when the placement is in
            conditions = set_condition(conditions, placement)
        else:
            conditions = tuple(c for c in conditions if c.type != COND_PLACEMENT)
        if (phase, bound, conditions) == (claim.phase, claim.bound_data_source, claim.conditions):
            return
        on_its_way = self.world.statuses_in_flight.get(key)
        if on_its_way is not None and on_its_way == status_transition(phase, bound, conditions):
            return  # the same transition is on its way (its condition times aside): its outcome brings the claim back
        # (another transition replaces the write on its way: the executor defers a claim's status, and writes the
        # latest one only — a claim resolved within that delay goes from nothing to Bound in one write)
        self.emit(
            UpdateClaimStatus(claim=claim.ref, phase=phase, bound_data_source=bound, conditions=conditions),
            f"claim {key}: {cond.reason}: {cond.message}",
        )
        previous = next((c for c in claim.conditions if c.type == COND_BOUND), None)
        # An Event only for what a user would ask about: a claim that cannot be bound, and why. Its being bound is
        # its status, and the trail is in the log (tether replay --explain): no write on the shared API server.
        if cond.reason in WARNING_REASONS and (previous is None or previous.reason != cond.reason):
            self.emit(
                EmitKubernetesEvent(involved=claim.ref, event_type="Warning", reason=cond.reason,
                                    message=cond.message),
                f"claim {key} changed to {cond.reason}",
            )

    def why_pending(self, claim: Claim) -> _Missing:
        if claim.identity is None:
            return _Missing("InvalidSpec", claim.problem)
        identity = claim.identity
        system = identity.system
        plugins = self.world.plugins
        if system not in plugins.plugins:
            if system in plugins.errors:
                return _Missing("PluginConfigInvalid", f"plugin {system!r} is misconfigured: {plugins.errors[system]}")
            return _Missing("UnknownSystem", f"no data-source plugin is configured for system {system!r}")
        cached = self.missing.get(identity.key)
        if cached is None:
            cached = self.missing[identity.key] = self.resolve(identity)
        return cached

    def resolve(self, identity: DataIdentity) -> _Missing:
        """Drive the catalog side for an identity that has no usable DataSource (once per decision)."""
        world = self.world
        key = identity.key
        name = data_source_name(identity)
        existing = world.sources.get(name)
        if existing is not None and existing.deleting:
            return _Missing("WaitingForDataSourceDeletion",
                            f"DataSource {name} is being deleted; it will be re-resolved")
        if existing is not None:
            return _Missing("DataSourceNameConflict",
                            f"DataSource {name} exists but caches another data source ({existing.identity})")
        attempt = world.lookups_in_flight.get(key)
        if attempt is not None:
            return _Missing("Resolving", f"looking up {key} in the catalog (attempt {attempt})")
        lookup = world.lookups.get(key)
        plugin = world.plugins.plugins[identity.system]
        if lookup is None or lookup.kind == "expired":
            attempt = 1 if lookup is None else lookup.attempt + 1
            self.emit(LookupDataLocation(identity=identity, trigger="miss" if attempt == 1 else "retry",
                                         attempt=attempt),
                      f"no DataSource caches {key}: looking it up (attempt {attempt})")
            return _Missing("Resolving", f"looking up {key} in the catalog (attempt {attempt})")
        if lookup.kind == "resolved":
            clusters = map_location(plugin.location_mapping, lookup.location)
            if clusters is None:
                return _Missing("LocationUnmapped", f"no clusters found for location {lookup.location!r}: no prefix "
                                f"of plugin {plugin.key!r} locationMapping matches")
            command = creation(name, identity, lookup, plugin, clusters)
            refused = world.rejected.get(command_id(command)) if world.rejected else None
            if refused is not None:
                return _Missing("DataSourceCreateFailed", f"creating DataSource {name} failed: {refused}")
            self.emit(command, f"{key} lives at {lookup.location} → clusters {','.join(clusters)}: caching it")
            return _Missing("CreatingDataSource", f"creating DataSource {name} for location {lookup.location}")
        # not found, or failed: retry on a timer (a table may be created later; a catalog may come back)
        retry = lookup.kind == "not-found" or lookup.retryable
        if retry:
            fire_at = lookup.at_ms + backoff_ms(lookup.attempt)
            self.emit(StartTimer(timer_id=f"lookup-retry|{lookup.attempt}|{key}", fire_at_ms=fire_at,
                                 purpose="lookup-retry", subject=f"Data/{key}"),
                      f"lookup of {key} answered {lookup.kind}: retrying at {rfc3339(fire_at)}")
        if lookup.kind == "not-found":
            return _Missing("DataSourceNotFound", f"{key} is not in the catalog: {lookup.message}")
        return _Missing("LookupFailed", f"looking up {key} failed: {lookup.message}"
                        + ("" if retry else " (not retried: fix the configuration or the claim)"), transient=retry)

    # --- data sources -------------------------------------------------------------------------------------

    def bound_claims(self, source: Source) -> tuple[ObjectRef, ...]:
        """The refs of the claims ``source_for`` gives ``source``, sorted by namespace and name (its claimRefs)."""
        return self._bound_claims(source, shortcut=True)

    def _bound_claims_plain(self, source: Source) -> tuple[ObjectRef, ...]:
        """:meth:`bound_claims` without its shortcut (what the tests check it against)."""
        return self._bound_claims(source, shortcut=False)

    def _bound_claims(self, source: Source, *, shortcut: bool) -> tuple[ObjectRef, ...]:
        """``shortcut``: with one live DataSource for the identity, ``source_for`` gives it to every claim of the
        identity that is not being deleted (the index lists a claim under its own identity's key), so the claims
        are taken without asking it for each (the tests compare both ways)."""
        world = self.world
        scope = world.claims_namespace
        others = [r for r in source.claim_refs if r.namespace != scope] if scope and source.claim_refs else []
        if source.identity is None or source.deleting:
            return tuple(sorted(others, key=_by_namespace_name)) if others else ()
        identity_key = source.identity.key
        keys = world.claims_by_identity.get(identity_key, ())
        claims = world.claims
        name = source.ref.name
        live = self.live_sources(identity_key) if shortcut and self.shortcuts and keys else ()
        if len(live) == 1:
            if world.sources[live[0]].ref.name != name:
                return tuple(sorted(others, key=_by_namespace_name)) if others else ()
            members = [claim for claim in map(claims.__getitem__, keys) if not claim.deleting]
        else:
            members = []
            for key in keys:
                claim = claims[key]
                chosen = self.source_for(key, claim)
                if chosen is not None and chosen.ref.name == name:
                    members.append(claim)
        refs = []
        for claim in members:
            c = claim.ref
            if c.api_version != DATA_GROUP_VERSION or c.kind != "DataSourceClaim":
                c = ObjectRef(api_version=DATA_GROUP_VERSION, kind="DataSourceClaim", name=c.name,
                              namespace=c.namespace, uid=c.uid)
            refs.append(c)  # (the claim's own ref when it already reads so: equal fields, equal bytes)
        if others:  # another tether's claims (module doc)
            refs.extend(others)
        refs.sort(key=_by_namespace_name)
        return tuple(refs)

    def source(self, name: str) -> None:
        source = self.world.sources.get(name)
        if source is None:
            return
        # one status write at a time: its outcome re-touches this DataSource, so a burst of claims is batched
        writing = slot("update_data_source_status", source.ref.key) in self.world.inflight
        refs = source.claim_refs if writing else self.bound_claims(source)
        if source.deleting:
            if not source.claim_refs and DATASOURCE_FINALIZER in source.finalizers:
                self.emit(RemoveFinalizer(target=source.ref, finalizer=DATASOURCE_FINALIZER),
                          f"DataSource {name} is being deleted and no claim refers to it any more")
        elif DATASOURCE_FINALIZER not in source.finalizers:
            self.emit(AddFinalizer(target=source.ref, finalizer=DATASOURCE_FINALIZER),
                      f"DataSource {name} has no finalizer")
        if not writing and (refs, len(refs)) != (source.claim_refs, source.bound_claims):
            self.emit(UpdateDataSourceStatus(name=name, claim_refs=refs, bound_claims=len(refs)),
                      f"DataSource {name} is used by {len(refs)} claim(s)")
        if (not source.deleting and not writing and source.reclaim_policy == "Delete" and source.released
                and not refs and not source.claim_refs):
            self.emit(DeleteDataSource(name=name, uid=source.ref.uid),
                      f"DataSource {name} has reclaimPolicy Delete and its last claim is gone")
        self.follow_data(source)

    def follow_data(self, source: Source) -> None:
        """Compute follows data: the catalog's latest location decides the DataSource's locality."""
        if source.identity is None or source.deleting:
            return
        lookup = self.world.lookups.get(source.identity.key)
        plugin = self.world.plugins.plugins.get(source.identity.system)
        if lookup is None or lookup.kind != "resolved" or plugin is None:
            return
        clusters = map_location(plugin.location_mapping, lookup.location)
        if clusters is None or (clusters == source.cluster_names and lookup.location == source.location):
            return
        self.emit(UpdateDataSourceLocality(name=source.ref.name, cluster_names=clusters, location=lookup.location),
                  f"{source.identity.key} now lives at {lookup.location} → clusters {','.join(clusters)} "
                  f"(was {','.join(source.cluster_names) or '<none>'})")



def decide(world: World, record: EventRecord, touched: Touched) -> list[Decision]:
    """Decisions for one event, given the world *after* the event was folded in and what it touched."""
    if not (touched.claims or touched.sources or touched.bindings or touched.identities or touched.all_claims
            or touched.all_bindings):
        return []  # (an echo of a write already folded: a third of the events)
    claims = set(touched.claims)
    sources = set(touched.sources)
    bindings = set(touched.bindings)
    if touched.all_claims:
        claims.update(world.claims)
    for identity in touched.identities:
        claims.update(world.claims_by_identity.get(identity, ()))
        sources.update(world.sources_by_identity.get(identity, ()))
    by_workload = world.bindings_by_workload
    for key in claims:  # a claim's DataSources are in ``touched`` when its membership may change (world.py)
        claim = world.claims.get(key)
        if claim is not None and claim.workload in by_workload:
            bindings.update(by_workload[claim.workload])
    if touched.all_bindings:
        bindings.update(k for k, b in world.bindings.items() if b.injected or b.workload in world.claims_by_workload)
    for key in bindings:  # a binding's claims show whether it is injected: keep their status exact
        b = world.bindings.get(key)
        if b is not None and b.workload in world.claims_by_workload:
            claims.update(world.claims_by_workload[b.workload])
    if not (claims or sources or bindings):
        return []
    d = DecisionPass(world, record)  # claims, then DataSources, then bindings, each in sorted order
    if claims:
        for key in sorted(claims):
            d.claim(key)
    if sources:
        for name in sorted(sources):
            d.source(name)
    if bindings:
        for key in sorted(bindings):
            d.binding(key)
    return d.out




__all__ = ["DECIDER", "DecisionPass", "decide"]
