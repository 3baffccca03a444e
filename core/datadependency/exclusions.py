"""tether's share of a ResourceBinding's placement: the cluster exclusions it adds, and nothing else.

Affinity is expressed the way Volcano Global does it — ``clusterAffinity.exclude`` — rather than by
``clusterNames``: an exclusion composes with whatever the user wrote (their clusterNames, label and field
selectors, their own exclusions), whereas an allow-list would have to be intersected with theirs and could
silently become empty. The price: a cluster that joins Karmada is allowed until tether sees it, so the decider
re-plans every injected binding when the set of clusters changes.

What tether added is recorded in the annotation ``datadependency.volcano.sh/excluded-clusters`` (sorted,
comma-joined), next to the gate annotation ``datadependency.volcano.sh/placement-injected: "true"``. The user's
exclusions are therefore always ``exclude - added``, which is what makes the plan level-triggered:

* a binding whose placement was overwritten by Karmada's detector (it re-applies the PropagationPolicy on every
  policy change) has lost tether's exclusions but kept the annotations, so :func:`plan_placement` sees the
  difference and puts them back;
* removing tether's share strips exactly what it added, never the user's own exclusions.

With ``clusterAffinities`` (several alternative terms) the exclusions are added to every term. A user may
exclude a cluster in one term and not in another, so one union annotation cannot say what tether added where;
tether therefore also records its additions per term (``tether.dev/added-exclusions``: a JSON object keyed by
``affinityName``, or by position when a term has no name) and strips per term. A binding annotated only with
VG's union (written by Volcano Global, or a single ``clusterAffinity``) is read with the union for every term.

Both the decider (to tell whether a binding is in sync) and the Kubernetes executor (to build the merge patch
from the object it just read) call :func:`plan_placement`, so they cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from ..keys import ADDED_BY_TERM_ANNOTATION, EXCLUDED_CLUSTERS_ANNOTATION, PLACEMENT_INJECTED_ANNOTATION
from ..world.views import added_exclusions


class PlacementPlan(msgspec.Struct, frozen=True):
    """What a binding's placement and annotations should become."""

    placement: dict[str, Any]
    annotations: dict[str, str | None]  # a merge-patch of annotations: None removes a key
    added: tuple[str, ...]
    changed: bool


def json_annotation(annotations: Mapping[str, str], key: str) -> dict[str, Any] | None:
    """The JSON object an annotation of tether's holds (None: absent, or not a JSON object)."""
    raw = annotations.get(key)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _added_by_term(annotations: dict[str, str]) -> dict[str, frozenset[str]] | None:
    doc = json_annotation(annotations, ADDED_BY_TERM_ANNOTATION)
    if doc is None:
        return None
    return {str(k): frozenset(c for c in v if isinstance(c, str)) for k, v in doc.items() if isinstance(v, list)}


def _term_key(term: dict[str, Any], index: int) -> str:
    name = term.get("affinityName")
    return name if isinstance(name, str) and name else str(index)


def _terms(placement: dict[str, Any]) -> list[dict[str, Any]]:
    """The affinity terms of a placement (copied), creating ``clusterAffinity`` when there is none."""
    alternatives = placement.get("clusterAffinities")
    if isinstance(alternatives, list) and alternatives:
        return [t for t in alternatives if isinstance(t, dict)]  # terms are inline ClusterAffinity + affinityName
    affinity = placement.get("clusterAffinity")
    if not isinstance(affinity, dict):
        affinity = {}
        placement["clusterAffinity"] = affinity
    return [affinity]


def _copy_terms(placement: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``placement`` deep enough for the plan to edit its terms' ``exclude`` (everything else shared).

    A full ``copy.deepcopy`` was most of the plan's cost, and the plan runs for every binding a decision touches."""
    after = dict(placement)
    affinity = after.get("clusterAffinity")
    if isinstance(affinity, dict):
        after["clusterAffinity"] = dict(affinity)
    alternatives = after.get("clusterAffinities")
    if isinstance(alternatives, list):
        after["clusterAffinities"] = [dict(t) if isinstance(t, dict) else t for t in alternatives]
    return after


def plan_placement(
    *, placement: dict[str, Any] | None, annotations: dict[str, str], desired: frozenset[str] | None
) -> PlacementPlan:
    """Plan tether's exclusions: ``desired`` clusters excluded (None: remove tether's share)."""
    before = placement or {}
    after = _copy_terms(before)
    old_added = added_exclusions(annotations)
    old_by_term = _added_by_term(annotations)
    added: set[str] = set()
    added_by_term: dict[str, list[str]] = {}
    if desired is None and not old_added:
        terms: list[dict[str, Any]] = []  # nothing of ours to strip: leave the placement untouched
    elif desired is None:
        terms = [after["clusterAffinity"]] if isinstance(after.get("clusterAffinity"), dict) else []
        alternatives = after.get("clusterAffinities")
        if isinstance(alternatives, list):
            terms += [t for t in alternatives if isinstance(t, dict)]
    else:
        terms = _terms(after)
    multi = isinstance(after.get("clusterAffinities"), list) and bool(after.get("clusterAffinities"))
    for index, term in enumerate(terms):
        exclude = term.get("exclude")
        current = [c for c in exclude if isinstance(c, str)] if isinstance(exclude, list) else []
        term_key = _term_key(term, index)
        ours = old_by_term.get(term_key, frozenset()) if old_by_term is not None else old_added
        user = [c for c in current if c not in ours]
        if desired is None:
            new = user
        else:
            mine = sorted(desired.difference(user))
            added.update(mine)
            added_by_term[term_key] = mine
            new = user + mine
        if new:
            term["exclude"] = new
        else:
            term.pop("exclude", None)
    if desired is None:
        wanted: dict[str, str | None] = {PLACEMENT_INJECTED_ANNOTATION: None, EXCLUDED_CLUSTERS_ANNOTATION: None,
                                         ADDED_BY_TERM_ANNOTATION: None}
    else:
        wanted = {PLACEMENT_INJECTED_ANNOTATION: "true", EXCLUDED_CLUSTERS_ANNOTATION: ",".join(sorted(added)),
                  ADDED_BY_TERM_ANNOTATION: json.dumps(added_by_term, sort_keys=True, separators=(",", ":"))
                  if multi else None}
    annotation_patch = {k: v for k, v in wanted.items() if annotations.get(k) != v}
    changed = bool(annotation_patch) or after != before
    return PlacementPlan(placement=after, annotations=annotation_patch, added=tuple(sorted(added)), changed=changed)
