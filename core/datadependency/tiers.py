"""Locality tiers: a workload that prefers its data's clusters, and falls over to clusters near them.

A claim whose locality is ``Preferred`` (``core.locality``: the claim, its table's prefix or its system says so)
does not pin its workload to the data's clusters. tether writes the binding's ``placement.clusterAffinities`` as
ordered groups instead, and karmada-scheduler tries them in order, moving to the next only when one cannot hold the
workload (its ``status.schedulerObservingAffinityName`` says which group it used):

1. ``data`` — the clusters next to the data (the clusters a ``Required`` claim would allow);
2. ``near-data`` — the other clusters sharing the value of the topology label (``topologyKey``, e.g.
   ``topology.karmada.io/region``) with a cluster of the data; without a topology key, no such group;
3. ``anywhere`` — when configured: any cluster.

With several claims: a ``Required`` claim bounds every group (its clusters only), the ``Preferred`` ones make them —
``data`` is the clusters holding all their data, ``near-data`` the clusters near all of it.

**A user's own affinity is respected, never overwritten.** Each group is the user's term (their ``clusterAffinity``,
or each of their ``clusterAffinities`` in their order) with ``clusterNames`` narrowed to the tier's clusters; their
label and field selectors and exclusions stay. A group that selects no known cluster is left out, and the
``tether.dev/locality-tiers`` annotation and the decision say so. The annotation also records the user's affinity the
groups replace and a digest of the groups written: Karmada's detector rewrites ``placement`` on every policy apply,
and a placement whose groups are not the ones written is the user's (a revert, or an edit), from which the groups
are computed again — level-triggered, as the exclusions are (``exclusions``).

**The group names carry the data's place** (``data-3f2a1c``: a digest of the data's clusters). karmada-scheduler
starts from the group it last used (``schedulerObservingAffinityName``) and only goes forward; a name it no longer
finds sends it back to the first group. So when the data moves the names change with it, and the workload is placed
from the new ``data`` group again — not left in a ``near-data`` or ``anywhere`` group of the old place. While the
data stays put, a workload that fell over stays where it fell (Karmada's own rule).

**Refused, not guessed.** A topology key no known Cluster carries, or a claim's ``spec.locality`` that does not
parse, is refused with a reason (the claim's ``PlacementInjected`` condition; the daemon's status, a warning log
and ``tether_locality_config_valid``: :func:`locality_problems`). Then nothing already placed changes: a binding
placed by tiers keeps them as they are, and a binding without tiers gets the ``Required`` placement.

Everything here is pure: the decider (``binding_placement``) plans with it, the Kubernetes executor applies it to the
object it just read (:func:`plan_tiers`, :func:`plan_binding`), so the two cannot disagree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from ..commands import SetBindingPlacement, SetBindingTiers, TierTerm
from ..keys import (
    ADDED_BY_TERM_ANNOTATION,
    EXCLUDED_CLUSTERS_ANNOTATION,
    LOCALITY_TIERS_ANNOTATION,
    PLACEMENT_INJECTED_ANNOTATION,
)
from ..locality import NO_PLUGIN_LOCALITY, Locality, resolve_locality
from ..world import World
from ..world.clusters import NOWHERE, ClusterPlace
from ..world.views import Claim
from .exclusions import PlacementPlan, json_annotation, plan_placement

DATA, NEAR_DATA, ANYWHERE = "data", "near-data", "anywhere"
TIERS = (DATA, NEAR_DATA, ANYWHERE)
#: Karmada's limit on an ``affinityName``.
MAX_NAME = 32
_TETHER_KEYS = (PLACEMENT_INJECTED_ANNOTATION, EXCLUDED_CLUSTERS_ANNOTATION, ADDED_BY_TERM_ANNOTATION,
                LOCALITY_TIERS_ANNOTATION)


class TierPlan(msgspec.Struct, frozen=True):
    """What a binding placed by tiers should carry: its groups, what was left out (``note``), the clusters its
    groups allow (None: any, an ``anywhere`` group), and a one-line summary for reasons and conditions."""

    terms: tuple[TierTerm, ...]
    note: str
    allowed: frozenset[str] | None
    summary: str


class Keep(msgspec.Struct, frozen=True):
    """Locality refused for this binding, which carries tiers already: its placement is left as it is."""

    reason: str


# --- a claim's locality -----------------------------------------------------------------------------------------


def claim_locality(world: World, claim: Claim) -> Locality | str:
    """The claim's locality with every level applied, or why it is refused (``core.locality``)."""
    setting = claim.locality
    if setting is not None and setting.problem:
        return f"claim {claim.ref.namespace}/{claim.ref.name}: {setting.problem}"
    identity = claim.identity
    plugin = world.plugins.plugins.get(identity.system) if identity is not None else None
    if plugin is None and setting is None:
        return Locality()
    locality = resolve_locality(plugin.locality if plugin is not None else NO_PLUGIN_LOCALITY,
                                identity.name if identity is not None else "", setting)
    if locality.preferred and locality.topology_key and not _carried(world, locality.topology_key):
        return (f"topologyKey {locality.topology_key!r} (set by {locality.source}) is carried by no Karmada "
                "Cluster: the near-data group cannot be formed")
    return locality


def _carried(world: World, key: str) -> bool:
    return any(key in world.cluster_places.get(name, NOWHERE).labels for name in world.clusters)


def locality_problems(world: World) -> list[str]:
    """Every locality setting in force that is refused, with why: the plugin ConfigMap's, then the claims'
    (deduplicated, sorted) — what the daemon reports (status, a warning log, ``tether_locality_config_valid``)."""
    problems = {f"plugin {system!r}: locality refused (the previous one stays in force): {error}"
                for system, error in world.plugins.locality_errors.items()}
    for claim in world.claims.values():
        if claim.deleting or (claim.locality is None and not _system_configured(world, claim)):
            continue
        locality = claim_locality(world, claim)
        if isinstance(locality, str):
            problems.add(locality)
    return sorted(problems)


def _system_configured(world: World, claim: Claim) -> bool:
    identity = claim.identity
    plugin = world.plugins.plugins.get(identity.system) if identity is not None else None
    return plugin is not None and plugin.locality.configured


# --- the user's own affinity, and the groups --------------------------------------------------------------------


def _digest(terms: list[dict[str, Any]]) -> str:
    return hashlib.blake2b(json.dumps(terms, sort_keys=True, separators=(",", ":")).encode(),
                           digest_size=8).hexdigest()


def tiers_record(annotations: Mapping[str, str]) -> dict[str, Any] | None:
    """The ``tether.dev/locality-tiers`` annotation, parsed (None: absent or not an object)."""
    return json_annotation(annotations, LOCALITY_TIERS_ANNOTATION)


def user_affinity(placement: Mapping[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    """The user's own cluster affinity of a placement: ``{"clusterAffinity": ...}``, ``{"clusterAffinities": ...}`` or
    ``{}``. When the placement carries the groups tether wrote (their digest is on record), the one on record;
    otherwise the placement's own, without tether's exclusions (module doc)."""
    record = tiers_record(annotations)
    written = placement.get("clusterAffinities")
    if record is not None and isinstance(written, list) and record.get("written") == _digest(written):
        user = record.get("user")
        if isinstance(user, dict):
            return {k: v for k, v in user.items() if k in ("clusterAffinity", "clusterAffinities")}
    own = plan_placement(placement=dict(placement), annotations=dict(annotations), desired=None).placement
    out: dict[str, Any] = {}
    if isinstance(own.get("clusterAffinities"), list) and own["clusterAffinities"]:
        out["clusterAffinities"] = own["clusterAffinities"]
    elif isinstance(own.get("clusterAffinity"), dict) and own["clusterAffinity"]:
        out["clusterAffinity"] = own["clusterAffinity"]
    return out


def user_terms(user: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The user's terms, in their order (one empty term, selecting every cluster, when they have none)."""
    many = user.get("clusterAffinities")
    if isinstance(many, list) and many:
        return [t if isinstance(t, dict) else {} for t in many]
    one = user.get("clusterAffinity")
    return [one if isinstance(one, dict) else {}]


def term_name(tier: str, place: str, index: int, terms: int) -> str:
    """A group's ``affinityName``: the tier, the digest of the data's place, and the user's term (when they have
    several) — at most :data:`MAX_NAME` characters."""
    return (f"{tier}-{place}" if terms == 1 else f"{tier}-{place}-{index + 1}")[:MAX_NAME]


def tier_of(name: str) -> str:
    """The tier an ``affinityName`` tether wrote belongs to ("" for any other name)."""
    for tier in (NEAR_DATA, DATA, ANYWHERE):
        if name == tier or name.startswith(f"{tier}-"):
            return tier
    return ""


def _group(term: Mapping[str, Any], tier: TierTerm) -> dict[str, Any] | None:
    """The user's ``term`` narrowed to ``tier``'s clusters (None: nothing left of its own clusterNames)."""
    group = {k: v for k, v in term.items() if k != "affinityName"}
    if tier.clusters is not None:
        own = term.get("clusterNames")
        names = sorted(set(tier.clusters) & {n for n in own if isinstance(n, str)}) if isinstance(own, list) and own \
            else list(tier.clusters)
        if not names:
            return None
        group["clusterNames"] = names
    return {"affinityName": tier.name, **group}


def plan_tiers(*, placement: Mapping[str, Any] | None, annotations: Mapping[str, str],
               terms: tuple[TierTerm, ...], note: str) -> PlacementPlan:
    """The placement and annotations of a binding placed by ``terms`` (module doc). Unchanged when no group would be
    left (the decider falls back to the data's clusters alone before it asks for that)."""
    before = dict(placement or {})
    user = user_affinity(before, annotations)
    mine = user_terms(user)
    groups = [g for t in terms if 0 <= t.user_term < len(mine) and (g := _group(mine[t.user_term], t)) is not None]
    if not groups:
        return PlacementPlan(placement=before, annotations={}, added=(), changed=False)
    after = {k: v for k, v in before.items() if k not in ("clusterAffinity", "clusterAffinities")}
    after["clusterAffinities"] = groups
    record = json.dumps({"user": user, "written": _digest(groups), "note": note}, sort_keys=True,
                        separators=(",", ":"))
    wanted: dict[str, str | None] = {PLACEMENT_INJECTED_ANNOTATION: "true", EXCLUDED_CLUSTERS_ANNOTATION: None,
                                     ADDED_BY_TERM_ANNOTATION: None, LOCALITY_TIERS_ANNOTATION: record}
    patch = {k: v for k, v in wanted.items() if annotations.get(k) != v}
    return PlacementPlan(placement=after, annotations=patch, added=(), changed=bool(patch) or after != before)


def plan_binding(*, placement: Mapping[str, Any] | None, annotations: Mapping[str, str],
                 desired: frozenset[str] | None) -> PlacementPlan:
    """``exclusions.plan_placement`` for a binding that may carry tiers: without the tiers annotation, exactly it;
    with it, the user's own affinity put back first, then the exclusions planned on it (``desired``; None: tether's
    share removed), and the tiers annotation removed."""
    if LOCALITY_TIERS_ANNOTATION not in annotations:
        return plan_placement(placement=dict(placement) if placement is not None else None,
                              annotations=dict(annotations), desired=desired)
    before = dict(placement or {})
    base = {k: v for k, v in before.items() if k not in ("clusterAffinity", "clusterAffinities")}
    base.update(json.loads(json.dumps(user_affinity(before, annotations))))  # (a copy: the plan edits its terms)
    plan = plan_placement(placement=base, annotations={}, desired=desired)
    wanted = {k: plan.annotations.get(k) for k in _TETHER_KEYS}
    patch = {k: v for k, v in wanted.items() if annotations.get(k) != v}
    return PlacementPlan(placement=plan.placement, annotations=patch, added=plan.added,
                         changed=bool(patch) or plan.placement != before)


def plan_command(command: SetBindingPlacement | SetBindingTiers, *, spec: Mapping[str, Any],
                 annotations: Mapping[str, str]) -> tuple[PlacementPlan, tuple[str, ...], bool]:
    """What a placement command does to a binding whose ``spec`` and ``annotations`` were just read (the Kubernetes
    executor's and the fake cluster's one rule): its plan, the clusters it runs on that the placement no longer
    allows (what a ``rescheduleTriggeredAt`` is for), and whether tether's share stays on it."""
    if isinstance(command, SetBindingTiers):
        plan = plan_tiers(placement=spec.get("placement") or {}, annotations=annotations, terms=command.terms,
                          note=command.note)
        if any(t.clusters is None for t in command.terms):  # (an anywhere group: no cluster is outside)
            return plan, (), True
        allowed = {name for t in command.terms for name in t.clusters or ()}
        scheduled = {t.get("name") for t in spec.get("clusters") or () if isinstance(t, dict)}
        return plan, tuple(sorted(n for n in scheduled - allowed if isinstance(n, str))), True
    plan = plan_binding(placement=spec.get("placement") or {}, annotations=annotations,
                        desired=frozenset(command.excluded_clusters) if command.injected else None)
    return plan, command.excluded_clusters, command.injected


# --- which clusters a term selects ------------------------------------------------------------------------------


def _requirement(labels: Mapping[str, str], requirement: Any) -> bool:
    if not isinstance(requirement, dict):
        return False
    key, operator = requirement.get("key"), requirement.get("operator")
    if not isinstance(key, str):
        return False
    values = [v for v in requirement.get("values") or () if isinstance(v, str)]
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def _label_selector(selector: Any, labels: Mapping[str, str]) -> bool:
    if not isinstance(selector, dict):
        return True
    match = selector.get("matchLabels")
    if isinstance(match, dict) and any(labels.get(k) != v for k, v in match.items()):
        return False
    return all(_requirement(labels, r) for r in selector.get("matchExpressions") or ())


def _field_selector(selector: Any, place: ClusterPlace) -> bool:
    if not isinstance(selector, dict):
        return True
    for requirement in selector.get("matchExpressions") or ():
        if not isinstance(requirement, dict):
            return False
        key = requirement.get("key")
        value = place.field(key) if isinstance(key, str) else ""
        if not _requirement({key: value} if value and isinstance(key, str) else {}, requirement):
            return False
    return True


def selected(term: Mapping[str, Any], clusters: Iterable[str], places: Mapping[str, ClusterPlace]) -> list[str]:
    """The clusters among ``clusters`` a ClusterAffinity term selects, as karmada-scheduler's affinity filter does
    (clusterNames, exclude, labelSelector, fieldSelector), sorted."""
    names = term.get("clusterNames")
    allowed = {n for n in names if isinstance(n, str)} if isinstance(names, list) and names else None
    exclude = {n for n in term.get("exclude") or () if isinstance(n, str)}
    out = []
    for name in sorted(clusters):
        if (allowed is not None and name not in allowed) or name in exclude:
            continue
        place = places.get(name, NOWHERE)
        if _label_selector(term.get("labelSelector"), place.labels) and \
                _field_selector(term.get("fieldSelector"), place):
            out.append(name)
    return out


# --- the groups of a workload -----------------------------------------------------------------------------------


def data_place(clusters: Iterable[str]) -> str:
    """The digest of the data's clusters that group names carry (module doc)."""
    return hashlib.blake2b(",".join(sorted(clusters)).encode(), digest_size=3).hexdigest()


def near(world: World, clusters: Iterable[str], key: str) -> set[str]:
    """The known clusters sharing the value of label ``key`` with one of ``clusters`` (those included)."""
    places = world.cluster_places
    values = {v for c in clusters if (v := places.get(c, NOWHERE).labels.get(key)) is not None}
    return {name for name in world.clusters if places.get(name, NOWHERE).labels.get(key) in values} if values \
        else set()


def tier_sets(world: World, preferred: list[tuple[tuple[str, ...], Locality]], bound: set[str] | None,
              restrict: frozenset[str] | None) -> list[tuple[str, set[str] | None]]:
    """The tiers' clusters, in order (None: any cluster), from the ``Preferred`` claims' clusters and localities,
    within the ``Required`` claims' clusters (``bound``) and an admission check's clusters (``restrict``)."""
    data: set[str] | None = None
    close: set[str] | None = None
    for clusters, locality in preferred:
        data = set(clusters) if data is None else data & set(clusters)
        around = set(clusters) | (near(world, clusters, locality.topology_key) if locality.topology_key else set())
        close = around if close is None else close & around
    data, close = data or set(), close or set()
    limits = [s for s in (bound, restrict) if s is not None]
    for limit in limits:
        data &= limit
        close &= limit
    tiers: list[tuple[str, set[str] | None]] = [(DATA, data), (NEAR_DATA, close - data)]
    if all(locality.anywhere for _, locality in preferred):
        anywhere: set[str] | None = None
        for limit in limits:
            anywhere = set(limit) if anywhere is None else anywhere & limit
        tiers.append((ANYWHERE, anywhere))
    return tiers


def plan_groups(world: World, *, tiers: list[tuple[str, set[str] | None]], data: Iterable[str],
                placement: Mapping[str, Any], annotations: Mapping[str, str]) -> TierPlan | None:
    """The groups of a binding: each tier within each of the user's terms, in that order, the empty ones left out
    and said (None: no group selects a known cluster — the caller then keeps the workload on its data alone)."""
    mine = user_terms(user_affinity(placement, annotations))
    place = data_place(data)
    known, places = world.clusters, world.cluster_places
    terms: list[TierTerm] = []
    left_out: list[str] = []
    shown: list[str] = []
    allowed: set[str] | None = set()
    for tier, clusters in tiers:
        for index, term in enumerate(mine):
            name = term_name(tier, place, index, len(mine))
            within = known if clusters is None else clusters & set(known)
            chosen = selected(term, within, places)
            own = f" within your affinity term {term.get('affinityName') or index + 1}" if len(mine) > 1 or term \
                else ""
            if not chosen:
                if tier == NEAR_DATA and not clusters:
                    if index == 0:
                        left_out.append(f"{NEAR_DATA}: no other cluster is near the data")
                else:
                    left_out.append(f"{tier}{own}: no known cluster")
                continue
            terms.append(TierTerm(name=name, tier=tier, user_term=index,
                                  clusters=None if clusters is None else tuple(sorted(clusters))))
            shown.append(f"{tier} {','.join(chosen)}" if clusters is not None else f"{tier} (any)")
            if allowed is not None:
                if clusters is None:
                    allowed = None
                else:
                    allowed |= set(chosen)
    if not terms:
        return None
    note = "; ".join(f"left out {why}" for why in left_out)
    summary = "; ".join(shown) + (f" ({note})" if note else "")
    return TierPlan(terms=tuple(terms), note=note, allowed=frozenset(allowed) if allowed is not None else None,
                    summary=summary)


def tier_standing(placement: Mapping[str, Any], annotations: Mapping[str, str], observing: str,
                  condition: Mapping[str, Any] | None = None) -> str:
    """Which locality tier a binding is in and why, from karmada-scheduler's ``schedulerObservingAffinityName``
    (``observing``) and, when given, its ``Scheduled`` condition; "" when tiers do not place it."""
    if tiers_record(annotations) is None:
        return ""
    groups = [g for g in placement.get("clusterAffinities") or () if isinstance(g, dict)]
    names = [str(g.get("affinityName", "")) for g in groups]

    def shown(group: Mapping[str, Any]) -> str:
        clusters = group.get("clusterNames")
        where = ",".join(str(c) for c in clusters) if isinstance(clusters, list) and clusters else "any cluster"
        return f"{tier_of(str(group.get('affinityName', ''))) or group.get('affinityName')} ({where})"

    failed = condition is not None and condition.get("status") == "False"
    why = f"{condition.get('reason')}: {condition.get('message')}" if failed and condition is not None else ""
    if observing not in names:
        return f"in no tier yet: {why}" if why else "in no tier yet: not placed by karmada-scheduler yet"
    index = names.index(observing)
    text = f"tier {shown(groups[index])} [{observing}]"
    if index == 0:
        text += ": the first group, next to the data"
    else:
        text += (f": karmada-scheduler fell over to it — {', '.join(shown(g) for g in groups[:index])} could not "
                 "hold it when it was placed")
    if why:
        text += f"; its last scheduling failed ({why})"
    return text


__all__ = [
    "ANYWHERE", "DATA", "NEAR_DATA", "TIERS", "Keep", "TierPlan", "claim_locality", "data_place",
    "locality_problems", "plan_binding", "plan_command", "plan_groups", "plan_tiers", "selected", "term_name",
    "tier_of", "tier_sets", "tier_standing", "tiers_record", "user_affinity", "user_terms",
]
