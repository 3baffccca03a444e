"""Where a workload may run: the rules of a ResourceBinding in a data-dependency decision pass.

tether excludes every known Karmada cluster that does not hold the data of *all* the bound claims of the workload
(``exclusions`` explains the exclusion arithmetic); with no bound claim, tether's share is stripped. If the binding is
already scheduled on a cluster that is now excluded, ``spec.rescheduleTriggeredAt`` is set (Karmada's supported
trigger) so compute follows data. A placement reverted by someone else is simply out of sync and is re-injected. A
claim whose DataSource is being created (its lookup resolved to a mapped location, the creation not refused for
good) counts with the clusters that DataSource will have, so a cache miss places the binding in the decision that
creates the DataSource rather than one trip later.

The claim's ``PlacementInjected`` condition says how its workload's bindings stand, so it is computed here too
(:meth:`BindingPlacement.placement_condition`); the claim's other rules extend this class
(``decider.DecisionPass``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..commands import SetBindingPlacement, SetBindingTiers, command_id, command_name, command_target
from ..envelope import EventRecord
from ..identity import data_source_name
from ..keys import LOCALITY_TIERS_ANNOTATION
from ..kube import Condition
from ..locality import Locality
from ..plugin_config import map_location
from ..world import World
from ..world.admission_checks import DATA_LOADED, READY
from ..world.views import Binding, Claim, Source
from .decision_pass import PassBase, creation
from .exclusions import PlacementPlan
from .tiers import Keep, TierPlan, claim_locality, plan_binding, plan_groups, plan_tiers, tier_sets

#: The slot prefixes of the placement commands: their slots are built here (and tested by the claim rule).
SET_BINDING_PLACEMENT = command_name(SetBindingPlacement)
SET_BINDING_TIERS = command_name(SetBindingTiers)

#: What tether wants of a binding's placement: the clusters to exclude (Required), its locality tiers (Preferred),
#: its tiers kept as they are (locality refused), or nothing (None: no bound claim).
Desired = frozenset[str] | TierPlan | Keep | None

COND_PLACEMENT = "PlacementInjected"
INJECTING = "Injecting"  # the PlacementInjected reason while a binding's placement is being changed


class BindingPlacement(PassBase):
    """The binding rules of a decision pass (module doc), with their caches: a plan per binding, the clusters of
    the DataSource on its way per identity."""

    def __init__(self, world: World, record: EventRecord) -> None:
        super().__init__(world, record)
        self.plans: dict[str, tuple[PlacementPlan, Desired]] = {}
        self.anticipate: dict[str, tuple[str, ...] | None] = {}  # identity key → clusters (anticipated)
        self.refused: dict[str, str] = {}  # workload → why its locality is refused (placed Required, or kept)

    def placement_condition(self, claim: Claim, source: Source | None) -> Condition | None:
        if source is None:
            return None
        names = self.world.bindings_by_workload.get(claim.workload)
        if not names:
            return Condition(type=COND_PLACEMENT, status="False", reason="WaitingForResourceBinding",
                             message=f"no ResourceBinding binds workload {claim.workload} yet",
                             last_transition_time=self.now, observed_generation=claim.generation)
        bindings = sorted(names)
        all_bindings = self.world.bindings
        pending = [b for b in bindings if self.plan(b, all_bindings[b])[0].changed]
        if pending:
            return Condition(type=COND_PLACEMENT, status="False", reason=INJECTING,
                             message=f"updating the placement of {', '.join(pending)}",
                             last_transition_time=self.now, observed_generation=claim.generation)
        desired = self.plan(bindings[0], all_bindings[bindings[0]])[1]
        if isinstance(desired, TierPlan | Keep):
            return tier_condition(claim, bindings, desired, self.now)
        # The data's clusters, not the exclusions: those name every other Karmada cluster, and a cluster joining or
        # leaving the federation would rewrite every bound claim's status (the binding's annotation lists them).
        where = ",".join(source.cluster_names) or "<none>"
        refused = self.refused.get(claim.workload)
        if refused:
            return Condition(type=COND_PLACEMENT, status="True", reason="LocalityRefused",
                             message=f"{refused}; so {', '.join(bindings)} run on the data's clusters only "
                                     f"(Required: {where})",
                             last_transition_time=self.now, observed_generation=claim.generation)
        return Condition(type=COND_PLACEMENT, status="True", reason="Injected",
                         message=f"{', '.join(bindings)} placed where the data is (clusters: {where})",
                         last_transition_time=self.now, observed_generation=claim.generation)

    def placement_underway(self, claim: Claim) -> bool:
        """Whether every binding of the claim's workload whose placement must change is being written: its
        write in flight, or decided in this very pass (a decided claim's bindings are decided after it, and
        nothing stops their write: no retry is waiting, the API did not refuse it).

        Then the claim's status waits for the outcome, which brings the claim back (a binding's outcome touches
        its workload's claims), and Bound goes out with PlacementInjected in one write instead of two. A
        binding whose write failed is not under way: the claim then says so at once (``Injecting``)."""
        world = self.world
        for key in sorted(world.bindings_by_workload.get(claim.workload, ())):
            binding = world.bindings[key]
            plan, desired = self.plan(key, binding)
            if not plan.changed:
                continue
            _, cid, _, at = self.placing(binding, desired)
            if world.retry_wait and at in world.retry_wait:
                return False
            if world.rejected and cid in world.rejected:
                return False
        return True

    def desired(self, binding: Binding) -> Desired:
        """What tether wants of the binding's placement (:data:`Desired`): its locality tiers when a bound claim of
        its workload prefers its data's clusters (``tiers``), else the exclusions."""
        tiered = self.desired_tiers(binding)
        return tiered if tiered is not None else self.desired_exclusions(binding)

    def desired_tiers(self, binding: Binding) -> TierPlan | Keep | None:
        """The binding's locality tiers (None: Required — no claim prefers, or a refused locality on a binding
        without tiers, or no group with a known cluster). Claims without a locality of their own on a system that
        configures none are Required at the cost of two lookups: a log without tiers decides as before."""
        world = self.world
        keys = world.claims_by_workload.get(binding.workload)
        if not keys:
            return None
        plugins = world.plugins.plugins
        claims = world.claims
        for key in keys:  # the common case first: no locality anywhere near this workload (a lookup per claim)
            claim = claims[key]
            plugin = plugins.get(claim.identity.system) if claim.identity is not None else None
            if claim.locality is not None or (plugin is not None and plugin.locality.configured):
                break
        else:
            return None
        preferred: list[tuple[tuple[str, ...], Locality]] = []
        bound: set[str] | None = None
        refused = ""
        for key in sorted(keys):
            claim = claims[key]
            chosen = self.source_for(key, claim)
            names = chosen.cluster_names if chosen is not None else self.anticipated(claim)
            if names is None:
                continue
            plugin = plugins.get(claim.identity.system) if claim.identity is not None else None
            if claim.locality is None and (plugin is None or not plugin.locality.configured):
                bound = set(names) if bound is None else bound & set(names)
                continue
            locality = claim_locality(world, claim)
            if isinstance(locality, str):
                refused = locality
            elif locality.preferred:
                preferred.append((names, locality))
            else:
                bound = set(names) if bound is None else bound & set(names)
        if refused:
            self.refused[binding.workload] = refused
            return Keep(reason=refused) if LOCALITY_TIERS_ANNOTATION in binding.annotations else None
        if not preferred:
            return None
        data: set[str] = set(preferred[0][0]).intersection(*(set(c) for c, _ in preferred[1:]))
        tiers = tier_sets(world, preferred, bound, self.restriction(binding))
        return plan_groups(world, tiers=tiers, data=data, placement=binding.placement,
                           annotations=binding.annotations)

    #: Whether an admission check's clusters narrow the placement (``core.admission.checks`` asks without them).
    restrict = True

    def restriction(self, binding: Binding) -> frozenset[str] | None:
        """The clusters an admission check narrows the binding to (None: none does): the clusters its ``data-loaded``
        check found the data loaded in, once Ready (``core.admission.checks``)."""
        if not self.restrict:
            return None
        checks = self.world.admission.checks.get(binding.ref.key) if self.world.admission.checks else None
        for check in checks or ():
            if check.name == DATA_LOADED and check.state == READY and check.clusters:
                return frozenset(check.clusters)
        return None

    def desired_exclusions(self, binding: Binding) -> frozenset[str] | None:
        """Every known cluster that does not hold the data of all the workload's bound claims (None: no bound
        claim). Set algebra only, so the order the claims are visited in does not matter."""
        keys = self.world.claims_by_workload.get(binding.workload)
        if not keys:
            return None
        claims = self.world.claims
        allowed: set[str] | None = None
        known: set[str] = set()
        for key in keys:
            claim = claims[key]
            chosen = self.source_for(key, claim)
            if chosen is not None:
                names = chosen.cluster_names
            else:
                anticipated = self.anticipated(claim)
                if anticipated is None:
                    continue
                names = anticipated
            if allowed is None:
                allowed = set(names)
            else:
                allowed.intersection_update(names)
            known.update(names)
        if allowed is None:
            return None
        restrict = self.restriction(binding)
        if restrict is not None:
            allowed &= restrict
        known.update(self.world.clusters)
        desired = known - allowed
        # Clusters tether excluded that are no longer known (gone from Karmada) exclude nothing: a binding that
        # differs from the plan by those alone is in sync, and is not written for them — on a federation where
        # clusters come and go, each one gone would otherwise rewrite every placed binding. The next write the
        # binding needs for another reason drops them.
        stale = {c for c in binding.added if c not in known and c not in allowed}
        if stale and desired.union(stale) == set(binding.added):
            desired.update(stale)
        return frozenset(desired)

    def anticipated(self, claim: Claim) -> tuple[str, ...] | None:
        """The clusters of the DataSource a claim without one is about to get (None: none is on its way).

        A claim with no DataSource whose identity's lookup resolved to a mapped location gets a DataSource created
        with exactly the clusters the plugin's locationMapping gives for that location (``resolve``). Its
        workload's binding can be placed from the same answer at once, in the decision that creates the DataSource,
        instead of one trip later when the DataSource exists and the claim is Bound: when it does, the exclusions
        are the same and the binding is not written again. Decided from the world alone, like ``resolve``'s
        CreateDataSource: no DataSource of that name (a deleting one or one caching another identity blocks the
        creation), a resolved lookup (the last one, also while a re-lookup is in flight, so a re-lookup does not
        strip and re-inject), a location the mapping knows, and a creation the API has not rejected for good (a
        rejection touches the identity's claims, and the anticipation, hence the exclusions, go away)."""
        identity = claim.identity
        if identity is None or claim.deleting:
            return None
        key = identity.key
        cache = self.anticipate
        if key in cache:
            return cache[key]
        clusters: tuple[str, ...] | None = None
        world = self.world
        lookup = world.lookups.get(key)
        plugin = world.plugins.plugins.get(identity.system)
        if lookup is not None and lookup.kind == "resolved" and plugin is not None:
            name = data_source_name(identity)
            if name not in world.sources:
                clusters = map_location(plugin.location_mapping, lookup.location)
                if clusters is not None and world.rejected and \
                        command_id(creation(name, identity, lookup, plugin, clusters)) in world.rejected:
                    clusters = None
        cache[key] = clusters
        return clusters

    def plan(self, key: str, binding: Binding) -> tuple[PlacementPlan, Desired]:
        """The placement plan of the binding stored under ``key`` (once per binding per decision)."""
        cached = self.plans.get(key)
        if cached is None:
            desired = self.desired(binding)
            memo = binding.__dict__.get("plan")  # (desired, plan) of an earlier decision on this very observation
            if memo is not None and memo[0] == desired:
                plan = memo[1]
            else:
                plan = planned(binding.placement, binding.annotations, desired)
                binding.__dict__["plan"] = (desired, plan)  # the plan is pure: same inputs, same plan
            cached = self.plans[key] = (plan, desired)
        return cached

    def plan_view(self, view: Binding, annotations: Mapping[str, str]) -> tuple[PlacementPlan, Desired]:
        """The plan of a binding that is not (yet) in the world, with all its ``annotations`` (the webhook's)."""
        desired = self.desired(view) if view.workload else None
        return planned(view.placement, annotations, desired), desired

    def placing(self, binding: Binding,
                desired: Desired) -> tuple[SetBindingPlacement | SetBindingTiers, str, str, str]:
        """The binding's placement command for ``desired``, with its id, target and slot — memoised on this
        observation of the binding (the view's __dict__, as the plan) for the last (desired, reschedule) it was
        decided with."""
        scheduled = binding.scheduled_clusters
        if isinstance(desired, TierPlan | Keep):
            allowed = desired.allowed if isinstance(desired, TierPlan) else None
            reschedule = self.now if allowed is not None and scheduled and not allowed.issuperset(scheduled) else ""
        else:
            reschedule = self.now if desired and scheduled and not desired.isdisjoint(scheduled) else ""
        placing = binding.__dict__.get("placing") if self.shortcuts else None
        if placing is None or placing[0] != desired or placing[1] != reschedule:
            command: SetBindingPlacement | SetBindingTiers
            if isinstance(desired, TierPlan | Keep):
                terms, note = (desired.terms, desired.note) if isinstance(desired, TierPlan) else ((), "")
                command = SetBindingTiers(binding=binding.ref, terms=terms, note=note, reschedule_at=reschedule)
            elif desired is None:
                command = SetBindingPlacement(binding=binding.ref, excluded_clusters=(), injected=False)
            else:
                command = SetBindingPlacement(binding=binding.ref, excluded_clusters=tuple(sorted(desired)),
                                              injected=True, reschedule_at=reschedule)
            target = command_target(command)
            placing = binding.__dict__["placing"] = (desired, reschedule, command, command_id(command), target,
                                                     f"{command_name(command)}:{target}")
        return placing[2], placing[3], placing[4], placing[5]

    def binding(self, key: str) -> None:
        binding = self.world.bindings.get(key)
        if binding is None:
            return
        plan, desired = self.plan(key, binding)
        if not plan.changed:
            return
        scheduled = binding.scheduled_clusters
        command, cid, target, at = self.placing(binding, desired)
        if self.shortcuts and self.world.inflight.get(at) == cid:
            return  # the same request is in flight: step would drop it (one decision per binding in a pass)
        if desired is None:
            self.emit(command, f"no bound claim for workload {binding.workload}: removing tether's exclusions from "
                      f"{key}", cid, target, at)
            return
        if isinstance(desired, TierPlan):
            outside = sorted(set(scheduled) - desired.allowed) if desired.allowed is not None else []
            self.emit(command, f"workload {binding.workload} prefers its data's clusters: locality tiers "
                      f"{desired.summary}" + (f"; rescheduling away from {','.join(outside)}" if outside else ""),
                      cid, target, at)
            return
        if isinstance(desired, Keep):
            return  # (a kept placement never changes: plan.changed is False)
        refused = self.refused.get(binding.workload)
        if refused:
            self.emit(command, f"{refused}; workload {binding.workload} runs on its data's clusters only: excluding "
                      f"{','.join(command.excluded_clusters) if isinstance(command, SetBindingPlacement) else ''}",
                      cid, target, at)
            return
        misplaced = sorted(desired.intersection(scheduled))
        assert isinstance(command, SetBindingPlacement)
        self.emit(
            command,
            f"workload {binding.workload} must run where its data is: excluding "
            f"{','.join(command.excluded_clusters) or '<none>'}"
            + (f"; rescheduling away from {','.join(misplaced)}" if misplaced else ""),
            cid, target, at,
        )


def planned(placement: Mapping[str, object] | None, annotations: Mapping[str, str], desired: Desired
            ) -> PlacementPlan:
    """The plan of a placement for ``desired`` (what the executors compute from the object they read)."""
    if isinstance(desired, TierPlan):
        return plan_tiers(placement=placement, annotations=annotations, terms=desired.terms, note=desired.note)
    if isinstance(desired, Keep):
        return PlacementPlan(placement=dict(placement or {}), annotations={}, added=(), changed=False)
    return plan_binding(placement=placement, annotations=annotations, desired=desired)


def tier_condition(claim: Claim, bindings: list[str], desired: TierPlan | Keep, now: str) -> Condition:
    """The PlacementInjected condition of a claim whose workload is placed by locality tiers."""
    if isinstance(desired, Keep):
        return Condition(type=COND_PLACEMENT, status="True", reason="LocalityRefused",
                         message=f"{desired.reason}; the locality tiers of {', '.join(bindings)} are left as they are",
                         last_transition_time=now, observed_generation=claim.generation)
    return Condition(type=COND_PLACEMENT, status="True", reason="TiersInjected",
                     message=f"{', '.join(bindings)} placed by locality tiers: {desired.summary}",
                     last_transition_time=now, observed_generation=claim.generation)


__all__ = ["COND_PLACEMENT", "INJECTING", "SET_BINDING_PLACEMENT", "SET_BINDING_TIERS", "BindingPlacement", "Desired",
           "planned"]
