"""The job-level topology planner: where a gang of pods goes, with Godel's semantics, as a pure function.

tether places a Godel PodGroup's pods from outside the scheduler: the pods are created with a scheduling gate,
this planner picks the topology domain for the whole group, and the executor tightens each pod's node affinity
and removes the gate; kube-scheduler then picks the node *inside* the domain. Everything here is a function of
its arguments — no I/O, clock or randomness — so a replay of the log reaches the same plan byte for byte.

**The tree.** ``nodeSelector`` filters the nodes first. The *required* keys partition the rest by their combined
label values (a node missing one is dropped); each partition is a root domain. Each *preferred* key (largest
domain first) splits every domain of the level above by its value, giving a tree: bigPod → miniPod → tor. Sibling
domains are sorted by the sort rules in turn (stable: a tie goes to the next rule; after the last rule the label
value decides, so the order never depends on the order nodes were listed in). The default rule is
CPU / Capacity / Ascending. Capacity is the sum of the nodes' allocatable; Available the sum of each node's
allocatable - requested, floored at 0 per node (an overcommitted node offers nothing, and takes nothing from its
neighbours — Godel floors the domain's sum instead; the two differ only on overcommitted nodes).

**Candidates** (Godel's NodeGroups): every domain of the tree, smallest level first, each level in tree order
(parents' order, then the sorted children). A candidate takes the whole group or nothing. Its **circles** are the
leaf domains below it in tree order; pods fill a circle and spill to the next only when nothing more fits. A
domain some of whose nodes lack the next preferred key is not split for its ancestors: it is one circle (its
labelled children are still candidates of their own) — as Godel does.

**Cut-off.** A domain whose capacity is below the group's minimum request, in any resource the request names, is
not a candidate (and neither is anything inside it); it may still be a circle of a larger candidate, where it
takes part of the group. The minimum request is Godel's: the sum of the pending pods' requests when every pod is
needed (there are no more pods than ``minMember``), otherwise ``minMember`` x the smallest request per resource.
This is a cheap, aggregate filter; the decision itself packs the pods onto the nodes (below).

**Pinning.** Pods of the group already bound to nodes pin it: the root domain is theirs (members in different
required domains, on unknown nodes or on nodes missing a required label → a ``conflict`` plan). Each preferred
level keeps only the child holding all of them; where they differ the splitting stops. Pinned domains are neither
sorted nor cut off (the group has started there; Godel does the same for a scheduled unit).

**Waiting.** Nothing is decided before ``minMember`` pods of the group exist (bound ones count): the plan says
``waiting: 3/16 pods``.

**The decision.** Candidates are tried in order. For each, the pending pods (by name) are packed first-fit onto
the nodes of its circles in order (nodes by name, each node's free room = allocatable - requested), circle by
circle; identical requests are packed as one class, largest first, so a try costs one pass over the nodes it
visits, not one per pod. The first candidate that holds *every* pending pod is chosen. Failing that, the first
that holds the quorum (``minMember`` minus the members already bound, at least one); the pods that did not fit
are pinned to it too and wait there for room. This differs from Godel, which takes the first domain holding the
quorum even when a later one holds everyone: Godel re-plans its leftover pods, whereas the affinity tether writes
on a pod is final once the gate is gone, so tether prefers not to strand pods. No candidate → an
``unschedulable`` plan, and the pods stay gated until the world changes.

**The output** is per pod: ``required`` terms pinning it to the chosen domain (``key In [value]`` for every label
of the domain, ANDed into each ``nodeSelector`` term), and ``preferred`` terms for the domain's circles — the
pod's own circle first, then the others in order, weights 100, 90, …, 10 (at most ten: beyond that the required
term keeps the pod in the domain and kube-scheduler's own scoring decides). The planner deliberately emits no
``kubernetes.io/hostname`` terms: it places by domain, and leaves the node to kube-scheduler, which sees pods and
nodes the log has not yet; a node list would also grow with the domain and freeze a stale choice into the pod.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Literal

import msgspec

from ..quantity import ResourceList
from ..world.pod_group import DEFAULT_SORT_RULES, GroupSpec, SortRule
from .group_affinity import (
    NodeSelectorTerm,
    PodPlacement,
    PreferredSchedulingTerm,
    domain_requirements,
    selector_matches,
)

#: Weights of the preferred terms, the pod's own circle first (Kubernetes allows 1 to 100).
PREFERRED_WEIGHTS = (100, 90, 80, 70, 60, 50, 40, 30, 20, 10)

PlanStatus = Literal["waiting", "placed", "unschedulable", "conflict"]


class Node(msgspec.Struct, frozen=True, gc=False):
    """A node as the planner sees it; amounts in milli-units (``core.quantity``). ``requested`` is the sum of the
    requests of every pod bound to the node, the group's own bound members included, and of the pods the caller
    counts there on their way (the pod-placement decider: released, or being released, and not bound yet)."""

    name: str
    labels: dict[str, str] = {}
    allocatable: ResourceList = {}
    requested: ResourceList = {}


class GroupPod(msgspec.Struct, frozen=True, gc=False):
    """A member of the group: its request, and the node it is bound to (empty while pending)."""

    name: str
    request: ResourceList = {}
    node_name: str = ""


class Domain(msgspec.Struct, frozen=True, order=True, gc=False):
    """A topology domain: the (key, value) labels its nodes share, required keys first, then preferred keys down
    to its level. The root of a group without required keys has no labels (every node)."""

    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.labels)

    @property
    def name(self) -> str:
        """The domain's own label value (``tor1``)."""
        return self.labels[-1][1] if self.labels else ""


class Candidate(msgspec.Struct, frozen=True, gc=False):
    """A domain the planner tries, and the circles it fills in order."""

    domain: Domain
    circles: tuple[Domain, ...]


class Plan(msgspec.Struct, frozen=True):
    """What to do with the group's pending pods. ``placements`` (sorted by pod) only when ``placed``; ``tried`` is
    how many candidates were tried, the chosen one included."""

    status: PlanStatus
    reason: str
    domain: Domain | None = None
    placements: tuple[PodPlacement, ...] = ()
    tried: int = 0


class _Tree:
    """One planning pass: the filtered nodes (by name), their labels, and the sorted domain tree by level."""

    __slots__ = ("labels", "levels", "nodes")

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.labels = [node.labels for node in nodes]
        self.levels: list[list[_Dom]] = []


class _Dom:
    """A domain while the tree is built (mutable; Domain is made only for the domains a caller sees)."""

    __slots__ = ("capacity", "children", "circles", "complete", "cut_off", "labels", "members", "spare")

    def __init__(self, labels: tuple[tuple[str, str], ...], members: list[int]) -> None:
        self.labels = labels
        self.members = members  # node indexes, in name order
        self.children: list[_Dom] = []
        self.complete = True  # the children hold every node of the domain
        self.cut_off = False
        self.capacity: tuple[int, ...] = ()
        self.spare: tuple[int, ...] = ()
        self.circles: list[_Dom] = []


def _sums(columns: list[list[int]], members: list[int]) -> tuple[int, ...]:
    """Per resource, the sum of the members' column values (itemgetter + sum: both loops in C)."""
    if len(members) == 1:
        return tuple(column[members[0]] for column in columns)
    pick = itemgetter(*members)
    return tuple(sum(pick(column)) for column in columns)


def _group(labels: list[dict[str, str]], members: Sequence[int], keys: tuple[str, ...]
           ) -> tuple[dict[tuple[str, ...], list[int]], bool]:
    """Members grouped by their values of ``keys`` (insertion order), and whether any member lacks a key."""
    groups: dict[tuple[str, ...], list[int]] = {}
    missing = False
    if len(keys) == 1:  # every preferred level and most required partitions: one dict lookup per node
        key = keys[0]
        by_value: dict[str, list[int]] = {}
        for index in members:
            value = labels[index].get(key)
            if value is None:
                missing = True
                continue
            bucket = by_value.get(value)
            if bucket is None:
                by_value[value] = [index]
            else:
                bucket.append(index)
        return {(value,): bucket for value, bucket in by_value.items()}, missing
    for index in members:
        node_labels = labels[index]
        try:
            values = tuple([node_labels[key] for key in keys])
        except KeyError:
            missing = True
            continue
        bucket = groups.get(values)
        if bucket is None:
            groups[values] = [index]
        else:
            bucket.append(index)
    return groups, missing


def _minimum_request(pending: Sequence[GroupPod], min_member: int) -> ResourceList:
    """Godel's minimum request of the unit (see the module docstring)."""
    if len(pending) <= min_member:
        total: ResourceList = {}
        for pod in pending:
            for name, amount in pod.request.items():
                total[name] = total.get(name, 0) + amount
        return total
    names = {name for pod in pending for name in pod.request}
    return {name: min(pod.request.get(name, 0) for pod in pending) * min_member for name in sorted(names)}


def _pins(spec: GroupSpec, nodes: Sequence[Node], bound: Sequence[GroupPod]
          ) -> tuple[tuple[str, ...] | None, list[str | None], str]:
    """The required values the bound members pin the group to, the preferred value per level (None: they
    differ, stop splitting), and a conflict message ('' when none)."""
    if not bound:
        return None, [], ""
    by_name = {node.name: node for node in nodes}
    required, preferred = spec.affinity.required, spec.affinity.preferred
    roots: set[tuple[str, ...]] = set()
    per_level: list[set[str | None]] = [set() for _ in preferred]
    for pod in bound:
        node = by_name.get(pod.node_name)
        if node is None:
            return None, [], f"pod {pod.name} is bound to node {pod.node_name}, which is not known"
        missing = [key for key in required if key not in node.labels]
        if missing:
            return None, [], f"pod {pod.name} runs on node {node.name}, which has no label {missing[0]}"
        roots.add(tuple(node.labels[key] for key in required))
        for level, key in enumerate(preferred):
            per_level[level].add(node.labels.get(key))
    if len(roots) > 1:
        shown = "; ".join(",".join(f"{k}={v}" for k, v in zip(required, root, strict=True)) for root in sorted(roots))
        return None, [], f"members of the group run in different required domains: {shown}"
    pinned: list[str | None] = []
    for values in per_level:
        value = next(iter(values)) if len(values) == 1 else None
        pinned.append(value)
        if value is None:
            break
    return roots.pop(), pinned, ""


def _build(*, nodes: Sequence[Node], spec: GroupSpec, pending: Sequence[GroupPod], bound: Sequence[GroupPod]
           ) -> tuple[_Tree | None, str]:
    """The sorted, cut-off-marked domain tree; or None and the conflict that prevents one."""
    affinity = spec.affinity
    pinned_root, pinned_levels, conflict = _pins(spec, nodes, bound)
    if conflict:
        return None, conflict
    selector = affinity.node_selector
    kept = sorted((node for node in nodes if selector is None or selector_matches(selector, name=node.name,
                                                                                      labels=node.labels)),
                  key=lambda node: node.name)
    rules = affinity.sort_rules or DEFAULT_SORT_RULES
    minimum = {} if bound else _minimum_request(pending, spec.min_member)
    resources = tuple(dict.fromkeys([*sorted(minimum), *(rule.resource_name for rule in rules)]))
    tree = _Tree(kept)
    capacity = [[node.allocatable.get(name, 0) for node in kept] for name in resources]
    spare: list[list[int]] = []
    if any(rule.dimension == "Available" for rule in rules):  # spare room is summed only when a rule reads it
        spare = [[max(node.allocatable.get(name, 0) - node.requested.get(name, 0), 0) for node in kept]
                 for name in resources]

    # Split top-down: the required partition, then one preferred key per level.
    groups, _ = _group(tree.labels, range(len(kept)), affinity.required)
    if pinned_root is not None:
        groups = {pinned_root: groups.get(pinned_root, [])}
    level = [_Dom(tuple(zip(affinity.required, values, strict=True)), members)
             for values, members in groups.items()]
    tree.levels.append(level)
    for depth, key in enumerate(affinity.preferred):
        if pinned_root is not None and (depth >= len(pinned_levels) or pinned_levels[depth] is None):
            break  # the bound members differ at this level: the domains above are not split
        below: list[_Dom] = []
        for parent in level:
            split, missing = _group(tree.labels, parent.members, (key,))
            if pinned_root is not None:
                pin = pinned_levels[depth]
                split = {values: members for values, members in split.items() if values[0] == pin}
                missing = missing or sum(map(len, split.values())) < len(parent.members)
            parent.complete = not missing
            parent.children = [_Dom((*parent.labels, (key, values[0])), members) for values, members in split.items()]
            below.extend(parent.children)
        if not below:
            break
        tree.levels.append(below)
        level = below

    # Sum bottom-up (a complete domain is the sum of its children), then sort siblings and cut off top-down.
    for level in reversed(tree.levels):
        for dom in level:
            if dom.children and dom.complete:
                dom.capacity = tuple(map(sum, zip(*(child.capacity for child in dom.children), strict=True)))
                if spare:
                    dom.spare = tuple(map(sum, zip(*(child.spare for child in dom.children), strict=True)))
            elif dom.members:
                dom.capacity = _sums(capacity, dom.members)
                if spare:
                    dom.spare = _sums(spare, dom.members)
            else:
                dom.capacity = dom.spare = (0,) * len(resources)
    need = tuple(minimum.get(name, 0) for name in resources)
    sort = pinned_root is None
    _order(tree.levels[0], rules, resources, need, parent_cut=False, sort=sort)
    ordered = [tree.levels[0]]
    for _ in tree.levels[1:]:
        below = []
        for parent in ordered[-1]:
            _order(parent.children, rules, resources, need, parent_cut=parent.cut_off, sort=sort)
            below.extend(parent.children)
        ordered.append(below)
    tree.levels = ordered
    for level in reversed(tree.levels):
        for dom in level:
            dom.circles = [c for child in dom.children for c in child.circles] if dom.children and dom.complete \
                else [dom]
    return tree, ""


def _order(doms: list[_Dom], rules: tuple[SortRule, ...], resources: tuple[str, ...], need: tuple[int, ...],
           *, parent_cut: bool, sort: bool) -> None:
    """Sort sibling domains by the rules (then by label value) and mark those too small for the group."""
    if sort:
        if not parent_cut:
            for dom in doms:
                dom.cut_off = any(have < want for have, want in zip(dom.capacity, need, strict=True))
        else:
            for dom in doms:
                dom.cut_off = True
        columns = [(resources.index(rule.resource_name), rule.dimension == "Available",
                    -1 if rule.order == "Descending" else 1) for rule in rules]
        doms.sort(key=lambda dom: (
            tuple(sign * (dom.spare if available else dom.capacity)[column] for column, available, sign in columns),
            dom.labels))


def _candidates(tree: _Tree) -> Iterator[_Dom]:
    """Domains in the order they are tried: smallest level first, tree order within a level, no cut-offs."""
    for level in reversed(tree.levels):
        for dom in level:
            if not dom.cut_off:
                yield dom


def candidate_order(*, nodes: Sequence[Node], spec: GroupSpec, pods: Sequence[GroupPod]) -> tuple[Candidate, ...]:
    """The candidates the planner would try for these pods, in order, with their circles (``()`` on a
    conflict). For explanations and tests; :func:`plan_group` walks the same order lazily."""
    pending = [pod for pod in pods if not pod.node_name]
    bound = [pod for pod in pods if pod.node_name]
    tree, _ = _build(nodes=nodes, spec=spec, pending=pending, bound=bound)
    if tree is None:
        return ()
    return tuple(Candidate(domain=Domain(dom.labels), circles=tuple(Domain(c.labels) for c in dom.circles))
                 for dom in _candidates(tree))


class _Classes:
    """The pending pods grouped by identical request (by name within a class), as vectors over the resources."""

    def __init__(self, pending: Sequence[GroupPod]) -> None:
        by_request: dict[tuple[tuple[str, int], ...], list[str]] = {}
        for pod in sorted(pending, key=lambda pod: pod.name):
            request = tuple(sorted((name, amount) for name, amount in pod.request.items() if amount > 0))
            by_request.setdefault(request, []).append(pod.name)
        # Largest requests first (first-fit decreasing packs tighter); the request itself breaks ties.
        self.requests = sorted(by_request, key=lambda request: (-sum(amount for _, amount in request), request))
        self.pods = [by_request[request] for request in self.requests]
        self.resources = tuple(sorted({name for request in self.requests for name, _ in request}))
        index = {name: i for i, name in enumerate(self.resources)}
        self.vectors = [tuple((index[name], amount) for name, amount in request) for request in self.requests]


def _pack(dom: _Dom, tree: _Tree, classes: _Classes, free_room: dict[int, list[int]]
          ) -> list[tuple[int, int, int]]:
    """First-fit of the classes onto the domain's circles: ``(circle index, class index, pod count)`` runs."""
    remaining = [len(pods) for pods in classes.pods]
    left = sum(remaining)
    runs: list[tuple[int, int, int]] = []
    nodes, resources = tree.nodes, classes.resources
    for circle_index, circle in enumerate(dom.circles):
        for index in circle.members:
            room = free_room.get(index)
            if room is None:
                node = nodes[index]
                room = free_room[index] = [max(node.allocatable.get(name, 0) - node.requested.get(name, 0), 0)
                                           for name in resources]
            free = room.copy()  # this try's copy: a rejected candidate must not consume room
            for class_index, vector in enumerate(classes.vectors):
                fit = remaining[class_index]
                if not fit:
                    continue
                for column, amount in vector:
                    fit = min(fit, free[column] // amount)
                if fit:
                    for column, amount in vector:
                        free[column] -= fit * amount
                    remaining[class_index] -= fit
                    left -= fit
                    runs.append((circle_index, class_index, fit))
            if not left:
                return runs
    return runs


def _placements(dom: _Dom, runs: list[tuple[int, int, int]], classes: _Classes, selector: tuple[NodeSelectorTerm,
                ...] | None) -> tuple[PodPlacement, ...]:
    own = domain_requirements(dom.labels)
    if selector is not None:
        required = tuple(NodeSelectorTerm(match_expressions=(*term.match_expressions, *own),
                                          match_fields=term.match_fields) for term in selector)
    else:
        required = (NodeSelectorTerm(match_expressions=own),) if own else ()
    depth = len(dom.labels)
    circles = [c for c in dom.circles if len(c.labels) > depth]  # the domain itself is no preference
    terms = [NodeSelectorTerm(match_expressions=domain_requirements(c.labels[depth:])) for c in circles]
    keys = [Domain(c.labels).key for c in dom.circles]
    preferred_by_circle: dict[int, tuple[PreferredSchedulingTerm, ...]] = {}

    def preferred(circle_index: int) -> tuple[PreferredSchedulingTerm, ...]:
        cached = preferred_by_circle.get(circle_index)
        if cached is None:
            # Either every circle lies below the domain (terms line up with dom.circles) or the domain is its
            # only circle (no terms).
            order = list(range(len(terms)))
            if terms and circle_index >= 0:
                order.remove(circle_index)
                order.insert(0, circle_index)
            cached = preferred_by_circle[circle_index] = tuple(
                PreferredSchedulingTerm(weight=weight, preference=terms[i])
                for weight, i in zip(PREFERRED_WEIGHTS, order, strict=False))
        return cached

    out: list[PodPlacement] = []
    taken = [0] * len(classes.pods)
    for circle_index, class_index, count in runs:
        start = taken[class_index]
        taken[class_index] = start + count
        terms_for_circle = preferred(circle_index)
        out.extend(PodPlacement(pod=name, circle=keys[circle_index], required=required, preferred=terms_for_circle)
                   for name in classes.pods[class_index][start:start + count])
    for class_index, pods in enumerate(classes.pods):  # did not fit: pinned to the domain, waiting for room
        out.extend(PodPlacement(pod=name, circle="", required=required, preferred=preferred(-1))
                   for name in pods[taken[class_index]:])
    out.sort(key=lambda placement: placement.pod)
    return tuple(out)


def plan_group(*, nodes: Sequence[Node], spec: GroupSpec, pods: Sequence[GroupPod]) -> Plan:
    """The plan for a group: wait, place its pending pods in one domain, or say why it cannot."""
    pending = [pod for pod in pods if not pod.node_name]
    bound = [pod for pod in pods if pod.node_name]
    if len(pods) < spec.min_member:
        return Plan(status="waiting", reason=f"waiting: {len(pods)}/{spec.min_member} pods")
    if not pending:
        return Plan(status="placed", reason=f"all {len(bound)} pods are bound")
    tree, conflict = _build(nodes=nodes, spec=spec, pending=pending, bound=bound)
    if tree is None:
        return Plan(status="conflict", reason=conflict)
    classes = _Classes(pending)
    quorum = min(len(pending), max(1, spec.min_member - len(bound)))
    free_room: dict[int, list[int]] = {}
    tried = 0
    fallback: tuple[_Dom, list[tuple[int, int, int]], int, int] | None = None
    for dom in _candidates(tree):
        tried += 1
        runs = _pack(dom, tree, classes, free_room)
        fitted = sum(count for _, _, count in runs)
        if fitted == len(pending):
            return _placed(dom, runs, classes, spec, fitted=fitted, pending=len(pending), rank=tried, tried=tried)
        if fitted >= quorum and fallback is None:
            fallback = (dom, runs, fitted, tried)
    if fallback is not None:  # no domain holds every pending pod: the first that holds the quorum
        dom, runs, fitted, rank = fallback
        return _placed(dom, runs, classes, spec, fitted=fitted, pending=len(pending), rank=rank, tried=tried)
    cut = sum(dom.cut_off for level in tree.levels for dom in level)
    return Plan(status="unschedulable", tried=tried,
                reason=f"no domain holds {quorum} of the {len(pending)} pending pods "
                       f"({tried} tried, {cut} too small for the group's minimum request)")


def _placed(dom: _Dom, runs: list[tuple[int, int, int]], classes: _Classes, spec: GroupSpec, *, fitted: int,
            pending: int, rank: int, tried: int) -> Plan:
    domain = Domain(dom.labels)
    return Plan(status="placed", domain=domain, tried=tried,
                reason=f"{fitted}/{pending} pending pods fit in {domain.key or 'the cluster'} "
                       f"(candidate {rank}, {len(dom.circles)} circles)",
                placements=_placements(dom, runs, classes, spec.affinity.node_selector))
