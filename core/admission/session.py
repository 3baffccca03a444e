"""Queue admission for suspended ResourceBindings: one Volcano-style session per cycle, as a pure function.

Karmada lets an external controller hold a ResourceBinding back from its scheduler with
``spec.suspension.scheduling: true``; tether (like Volcano Global's dispatcher) creates queue-managed bindings
suspended and, every admission cycle, decides which of them may go. This module is that decision. It reads
nothing but its arguments (no clock, no I/O, no randomness) and returns the same bytes for the same input, so a
replay re-derives every admission and ``--explain`` can say why a binding is still held.

**The session.** :func:`admission_cycle` opens a session over the queues, the bindings and the ready clusters,
the way Volcano's scheduler opens one per cycle: every configured plugin is instantiated on it and contributes

* *queue order* and *binding order* — as **sort keys**, not comparators. Volcano's rule "the first tier whose
  plugins give a non-zero comparison decides" is exactly a lexicographic comparison of the plugins' keys laid out
  in tier order, and a tuple key lets Python sort 10k bindings in C instead of calling a comparator 130k times.
  Ties always end in creation time, then UID, then the name, so the order is total and never depends on input
  order;
* *validity checks* — holds that do not depend on what else is admitted (``datadependency``: the data placement
  is not injected yet), applied once when the session opens, so a held binding neither takes a turn nor inflates
  its queue's demand;
* *predicates* — fit checks against what the session has admitted so far (``capacity``, ``proportion``). Any
  plugin in any tier can hold a binding; the reason given is the first holding plugin's, in tier order;
* ``gang`` decides what the predicates check: with it, the whole request (per-replica request * replicas *
  copies) must fit or nothing is admitted; without it, one replica fitting is enough and the whole request is
  still charged to the queue — Karmada then places what fits, and the queue can end up over its limits by less
  than one binding (that is the price of switching gang off).

**The cycle** is Volcano Global's dispatcher, generalised: round robin across queues, one admission per queue
per round, queues re-ordered every round by the queue order (a share changes as its queue admits). In its turn a
queue offers its bindings in binding order until one is admitted; a binding that does not fit is held for this
cycle and never blocks the ones behind it or other queues. Every suspended binding is therefore looked at exactly
once per cycle — linear in the number of bindings, whatever the plugins.

**Backfill.** Checking gang requests against a fair share can deadlock: two queues whose next bindings each
need more than half the clusters would each be "over its share" for ever. When the configuration has Volcano's
``backfill`` action (the default), a second pass offers the bindings held *only* for being over their share what
the fair pass left free, in the same order, under every other predicate — unless a binding *within* its share was
held for lack of room in the clusters in the fair pass: then the backfill is skipped for this cycle, since it
would hand that room to queues over their share and the binding could wait for ever. With a finite backlog every
binding that fits its queue's capabilities and the clusters on its own is therefore admitted eventually; under an
endless stream a higher-priority queue, or a queue within its share, may keep a larger binding waiting — unless
its queue's policy lets it evict (below).

**Accounting.** A queue's *allocated* is the whole request of its admitted (unsuspended) bindings plus what this
cycle admits; a parent queue's capability is checked against its whole subtree. The clusters' headroom is the sum
over ready clusters of ``allocatable - allocated`` (pass Karmada's ``allocating`` inside ``allocated``), minus
what this cycle admits. A binding admitted in an earlier cycle that Karmada has not placed yet is in its queue's
allocated but not yet in the clusters' — the session cannot know where it will land; the next cycle's cluster
summary corrects that, and the queue limits are exact regardless.

**Evictions.** When a queue's policy allows it (``withinQueue``, ``reclaim``: :mod:`.preemption`), a last pass takes
admissions back — the fewest bindings admitted before this cycle that make room, lowest priority and most recently
admitted first — to admit bindings still held by a predicate; an evicted binding waits in its queue again, and is
held while the binding it made room for waits (``Binding.evicted_for``). Without a policy the pass does not run.

**After admission** an admitted binding whose request grew (scale-up, more components, Divided → Duplicated) is
re-checked by :func:`recheck_admitted`: a growth past its queue is held (the decider suspends Karmada's dispatching
until the queue admits the new size), and the queue stays charged what the binding asks now.

The types the session and the plugins share are in :mod:`.model`, the plugins in :mod:`.plugins`, and the
configuration (Volcano's ``volcano-scheduler.conf``) in :mod:`.config`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from ..quantity import ResourceList
from ..world.admission_state import DEFAULT_ADMISSION_CONFIG, AdmissionConfig, Queue
from .model import (
    DEFAULT_QUEUE,
    ROOT_QUEUE,
    AdmissionOutcome,
    Binding,
    ClusterCapacity,
    Eviction,
    Hold,
    QueueState,
    QueueStatus,
    Session,
)
from .plugins import Predicate, ProportionPlugin, QueueKey, capability_overrun, open_plugins
from .preemption import evict_for_waiting

# --- the session --------------------------------------------------------------------------------------------


def _states(queues: Iterable[Queue], wanted: Iterable[str]) -> dict[str, QueueState]:
    """Queue states by name with their ancestor chains; ``default`` is made up when a binding wants it and it is
    missing (Volcano Global creates it at start-up; the caller should too)."""
    states: dict[str, QueueState] = {}
    for queue in sorted(queues, key=lambda q: q.name):
        if queue.name in states:
            raise ValueError(f"queue {queue.name!r} given twice")
        states[queue.name] = QueueState(queue)
    if DEFAULT_QUEUE not in states and DEFAULT_QUEUE in wanted:
        states[DEFAULT_QUEUE] = QueueState(Queue(name=DEFAULT_QUEUE))
        states = dict(sorted(states.items()))
    for state in states.values():
        chain = [state]
        parent = state.queue.parent
        while parent and not (parent == ROOT_QUEUE and ROOT_QUEUE not in states):
            ancestor = states.get(parent)
            if ancestor is None:
                state.problem = state.problem or f"queue {chain[-1].queue.name}: parent queue {parent} not found"
                break
            if ancestor in chain:
                loop = " -> ".join([*(s.queue.name for s in chain), parent])
                state.problem = f"queue {state.queue.name}: parent cycle {loop}"
                break
            chain.append(ancestor)
            parent = ancestor.queue.parent
        state.chain = tuple(chain)
        state.limits = tuple((holder.subtree, name, limit) for holder in state.chain
                             for name, limit in holder.queue.capability.items())
    for state in states.values():  # an ancestor that cannot admit closes its subtree (once every chain is known)
        if not state.problem:
            state.problem = next((a.problem for a in state.chain[1:] if a.problem), "")
    return states


def _charge(state: QueueState, total: Mapping[str, int]) -> None:
    allocated = state.allocated
    for name, amount in total.items():
        allocated[name] = allocated.get(name, 0) + amount
    for holder in state.chain:
        subtree = holder.subtree
        for name, amount in total.items():
            subtree[name] = subtree.get(name, 0) + amount


_sort_key = itemgetter(0)


def admission_cycle(*, queues: Sequence[Queue], bindings: Sequence[Binding], clusters: Sequence[ClusterCapacity],
                    config: AdmissionConfig = DEFAULT_ADMISSION_CONFIG) -> AdmissionOutcome:
    """One admission session: which suspended bindings to resume now, in order, and why the others wait.

    Raises ``ValueError`` when two queues or two bindings share a name (the caller's world is broken)."""
    if len({b.key for b in bindings}) != len(bindings):  # the set is built in C; the loop only on the error path
        seen: set[str] = set()
        for binding in bindings:
            if binding.key in seen:
                raise ValueError(f"binding {binding.key!r} given twice")
            seen.add(binding.key)
    states = _states(queues, {b.queue for b in bindings})
    session = Session(states, clusters)
    plugins = open_plugins(session, config)
    held: dict[str, Hold] = {}
    validators = plugins.validators
    binding_key = plugins.binding_sort_key
    evicts = bool(config.policies) and config.evicts()  # (a queue may evict: what it may take is kept)
    waiting: set[str] | None = None  # the bindings that wait (for the evicted ones: whom they made room for)
    # One pass over the bindings, doing each thing once per binding. Everything it adds up is an integer sum,
    # independent of the bindings' order: what is admitted goes to its queue's allocated only (the subtrees get
    # each queue's sum after the loop), what is eligible to the queue's request (the allocated is added after the
    # loop), what is held at once to its invalid_request.
    for binding in bindings:
        state = states.get(binding.queue)
        if state is None:
            if binding.suspended:
                held[binding.key] = Hold(binding.key, "queue", f"queue {binding.queue} not found")
            continue
        if binding.suspended:
            state.waiting += 1
            plugin, reason = "queue", state.problem
            if not reason and binding.evicted_for:
                if waiting is None:
                    waiting = {b.key for b in bindings if b.suspended}
                if binding.evicted_for in waiting:  # never readmitted ahead of the binding it made room for
                    plugin, reason = "evicted", (f"evicted for {binding.evicted_for.split('/', 1)[-1]}: waiting "
                                                 f"until it is admitted")
            if not reason:
                for name, valid in validators:
                    reason = valid(binding)
                    if reason:
                        plugin = name
                        break
            if reason:
                held[binding.key] = Hold(binding.key, plugin, reason)
                sums = state.invalid_request  # what waits but is not offered (pending_request in the status)
            else:
                sums = state.request
        else:
            state.admitted += 1
            sums = state.allocated
        # the whole request (Binding.total_request), built in the loop that adds it up; a single replica's is the
        # binding's own request, not a copy (the session never mutates a request)
        request = binding.request
        factor = binding.replicas * binding.copies
        if binding.whole is not None:  # several pod templates: every component's replicas, per copy
            request, factor = binding.whole, binding.copies
        if factor == 1:
            total = request
            for name, amount in request.items():
                sums[name] = sums.get(name, 0) + amount
        else:
            total = {}
            for name, amount in request.items():
                amount *= factor
                total[name] = amount
                sums[name] = sums.get(name, 0) + amount
        if sums is state.request:
            # (sort key, ...): the keys are unique (they end in the binding's key), so a Binding is never compared
            state.pending.append((binding_key(binding), binding, total))
        elif evicts and sums is state.allocated:
            state.running.append((binding, total))
    for state in states.values():
        allocated = state.allocated
        if allocated:
            for holder in state.chain:
                subtree = holder.subtree
                for name, amount in allocated.items():
                    subtree[name] = subtree.get(name, 0) + amount
            request = state.request  # allocated + every eligible suspended binding's whole request
            for name, amount in allocated.items():
                request[name] = request.get(name, 0) + amount
    plugins.session_opened()  # proportion's deserved needs every queue's request
    for state in states.values():
        # first in binding order last: offered by pop(). By the key alone: comparing whole entries would compare
        # each pair's keys twice (== then <)
        state.pending.sort(key=_sort_key, reverse=True)
        if evicts:
            state.offered = state.pending[::-1]
    resume: list[str] = []
    fair_share = plugins.fair_share
    # the fair pass's "over its fair share" holds, as the numbers of their reasons (queue, resource, would use,
    # deserves): a backfill offers every one of those bindings again and admits it or holds it for another reason,
    # so a reason is only written for the holds that stand
    over_share: dict[str, tuple[str, str, int, int]] = {}
    starved = _round_robin(states, session, plugins.predicates, plugins.queue_sort_key, held, resume,
                           fair_share=fair_share, over_share=over_share)
    lent = fair_share is not None and "backfill" in config.actions and not starved
    if lent and fair_share is not None:
        # backfill: what every queue could take within its share is taken, and no binding within its share waits
        # for room; lend what is left to the bindings held only for being over their share, in the same order
        for state in states.values():
            state.pending = state.deferred[::-1]
            state.deferred = []
        backfill = [(name, fit) for name, fit in plugins.predicates if name != fair_share.name]
        _round_robin(states, session, backfill, plugins.queue_sort_key, held, resume, fair_share=None,
                     over_share=over_share)
    elif fair_share is not None:
        for key, over in over_share.items():
            held[key] = Hold(key, fair_share.name, fair_share.over_share_reason(*over))
    evicted: list[Eviction] = []
    if evicts:
        # what a binding must fit to be admitted by evicting: every predicate, but its fair share when the backfill
        # lent room beyond it (a reclaim asks a share of its own: preemption.py)
        lent_by = fair_share.name if lent and fair_share is not None else None
        predicates = [(name, fit) for name, fit in plugins.predicates if name != lent_by]
        evicted = evict_for_waiting(states=states, session=session, predicates=predicates,
                                    queue_key=plugins.queue_sort_key, held=held, resume=resume,
                                    whole=session.whole_request, clusters=plugins.checks_clusters, config=config)
    return AdmissionOutcome(resume=tuple(resume), held=tuple([held[key] for key in sorted(held)]),
                            queues=tuple([_status(state) for state in states.values()]), evicted=tuple(evicted))


def _short_of_room(headroom: Mapping[str, int], demand: Mapping[str, int]) -> bool:
    return any(amount > headroom.get(name, 0) for name, amount in demand.items())


def _round_robin(states: Mapping[str, QueueState], session: Session, predicates: Sequence[tuple[str, Predicate]],
                 queue_key: QueueKey, held: dict[str, Hold], resume: list[str], *,
                 fair_share: ProportionPlugin | None, over_share: dict[str, tuple[str, str, int, int]]) -> bool:
    """Offer every pending binding once: queues in queue order each round, each admitting at most one binding per
    round. Bindings held by ``fair_share`` alone go to their queue's ``deferred`` list (the backfill's input) and
    the numbers of their reasons to ``over_share``. Returns whether a binding within its fair share was held for
    lack of room in the clusters (then a backfill would hand that room to queues over their share, and the binding
    could wait for ever)."""
    whole = session.whole_request
    headroom = session.headroom
    starved = False
    fair_name = fair_share.name if fair_share is not None else ""
    # the capacity plugin, when it is the first predicate: a queue whose capability is used up can then be drained
    # at once (_drain_exhausted) — every later binding asking for that resource gets capacity's own verdict
    capacity_first = predicates[0][0] if predicates and predicates[0][0] == "capacity" else None
    # The rounds as one heap of (round, queue key, queue): popping it gives round 0's queues in queue order, then
    # round 1's, and so on — exactly "every round, the active queues re-sorted by the queue order", without the
    # re-sort. A queue's key depends on its own allocated only (and on what the session fixed when it opened), and
    # only its own turn changes that, so the key it gets right after its turn is the one the next round would
    # compute; a turn that admitted nothing keeps its key as it is. Keys end in the queue's unique tiebreak, so
    # two entries never compare their queues.
    turns: list[tuple[int, Any, QueueState]] = [(0, queue_key(state), state) for state in states.values()
                                                if state.pending]
    heapq.heapify(turns)
    while turns:
        round_, key, state = heapq.heappop(turns)
        pending = state.pending
        admitted = False
        while pending:
            _, binding, total = entry = pending.pop()
            demand = total if whole else binding.request
            for plugin, fit in predicates:
                if plugin == fair_name and fair_share is not None:  # fit() without writing the reason
                    over = fair_share.overrun(state, demand)
                    if over is None:
                        continue
                    over_share[binding.key] = (state.queue.name, *over)
                    state.deferred.append(entry)
                    break
                reason = fit(state, demand)
                if reason:
                    held[binding.key] = Hold(binding.key, plugin, reason)
                    if fair_share is not None and not starved:
                        starved = _short_of_room(headroom, demand) and fair_share.within_share(state, demand)
                    if plugin == capacity_first:
                        starved = _drain_exhausted(state, whole, held, headroom, fair_share, starved)
                    break
            else:
                # (a binding the fair pass held is only offered again by the backfill, as one it held over its share:
                # that is not in ``held``, so there is nothing to take back)
                allocated = state.allocated
                for name, amount in total.items():  # (_charge, inlined, and the clusters' headroom in one loop)
                    allocated[name] = allocated.get(name, 0) + amount
                    headroom[name] = headroom.get(name, 0) - amount
                    for holder in state.chain:
                        subtree = holder.subtree
                        subtree[name] = subtree.get(name, 0) + amount
                state.waiting -= 1
                state.admitted += 1
                state.resumed += 1
                resume.append(binding.key)
                admitted = True
                break
        if pending:
            heapq.heappush(turns, (round_ + 1, queue_key(state) if admitted else key, state))
    return starved


def _drain_exhausted(state: QueueState, whole: bool, held: dict[str, Hold], headroom: Mapping[str, int],
                     fair_share: ProportionPlugin | None, starved: bool) -> bool:
    """After a capability hold: if the queue's (or an ancestor's) capability of some resource is used up, every
    pending binding of the queue that asks for any of it would be held by capacity, the first predicate, whatever
    the other predicates say — hold them now, with the reason capacity gives, instead of offering them one per round
    (the bulk of a cycle over a full queue). Bindings that do not ask for a used-up resource stay pending. Returns
    ``starved`` updated exactly as the round robin would have."""
    exhausted = [name for subtree, name, limit in state.limits if subtree.get(name, 0) >= limit]
    if not exhausted:
        return starved
    keep: list[tuple[Any, Binding, ResourceList]] = []
    # Nothing is charged while draining, so all a drained binding's verdicts depend on its demand alone: the reason
    # and whether it would leave a binding within its share short of room are worked out once per distinct demand
    # (a queue's bindings mostly ask for a few request shapes), and each drained binding is then one look-up.
    # ``starved`` only ever turns true, so a demand whose verdict was false is false for every binding asking it.
    reasons: dict[tuple[tuple[str, int], ...], str] = {}
    for entry in reversed(state.pending):  # in offer order (pending is popped from its end)
        _, binding, total = entry
        demand = total if whole else binding.request
        for name in exhausted:  # (a loop, not any() over a generator: this runs once per drained binding)
            if demand.get(name, 0) > 0:
                break
        else:
            keep.append(entry)
            continue
        shape = tuple(demand.items())
        reason = reasons.get(shape)
        if reason is None:
            reason = reasons[shape] = capability_overrun(state, demand)
            if fair_share is not None and not starved:
                starved = _short_of_room(headroom, demand) and fair_share.within_share(state, demand)
        held[binding.key] = Hold(binding.key, "capacity", reason)
    state.pending[:] = keep[::-1]  # in place: the round robin holds this very list
    return starved


def _pending_request(state: QueueState) -> ResourceList:
    # request = allocated before the cycle + every offered binding; allocated now = before + the resumed ones:
    # what was offered and not resumed is their difference (no bookkeeping per admission)
    waiting = dict(state.invalid_request)
    allocated = state.allocated
    for name, amount in state.request.items():
        waiting[name] = waiting.get(name, 0) + amount - allocated.get(name, 0)
    return {name: amount for name, amount in sorted(waiting.items()) if amount}


def _status(state: QueueState) -> QueueStatus:
    return QueueStatus(name=state.queue.name, allocated=dict(sorted(state.allocated.items())),
                       admitted=state.admitted, resumed=state.resumed, pending=state.waiting,
                       pending_request=_pending_request(state),
                       deserved=dict(sorted(state.deserved.items())))


# --- admitted workloads whose request grew ------------------------------------------------------------------


def recheck_admitted(*, queues: Sequence[Queue], bindings: Sequence[Binding],
                     config: AdmissionConfig = DEFAULT_ADMISSION_CONFIG) -> tuple[Hold, ...]:
    """Admitted bindings whose request grew past their queue's capability (or an ancestor's) since admission.

    A scale-up or a Divided → Duplicated change raises an admitted binding's request without passing admission
    again (Volcano Global's open bug). The binding keeps running as admitted, so its scheduling is not suspended
    again: the decider suspends Karmada's dispatching for it with the reason (the overrun annotation and a Warning
    Event) until the growth fits, and its queue admits nothing new until then (its allocated already counts the
    grown request).

    What was admitted stays admitted: every admitted binding is charged what it had when admitted (its
    ``admitted_request``, or its current request if that was not recorded, or if it shrank). Then the growths are
    charged one by one in binding order (priority first); a growth that does not fit is reported and not charged,
    so a later, smaller growth may still fit. Only queue capabilities are checked — cluster capacity is Karmada's
    scheduler's to report. Without the ``capacity`` plugin nothing is reported.
    """
    if not any(option.name == "capacity" and option.enable_predicate for tier in config.tiers
               for option in tier.plugins):
        return ()
    admitted = [b for b in bindings if not b.suspended]
    states = _states(queues, {b.queue for b in admitted})
    grown: list[tuple[Binding, ResourceList]] = []
    for binding in admitted:
        state = states.get(binding.queue)
        if state is None:
            continue
        total = binding.total_request()
        before = binding.admitted_request
        if before is None or all(amount <= before.get(name, 0) for name, amount in total.items()):
            _charge(state, total)
            continue
        base = {name: min(amount, before.get(name, 0)) for name, amount in total.items()}
        _charge(state, base)
        grown.append((binding, {name: amount - base[name] for name, amount in total.items()}))
    order = open_plugins(Session({}, ()), config).binding_sort_key  # binding order needs no session state
    grown.sort(key=lambda entry: order(entry[0]))
    out: list[Hold] = []
    for binding, growth in grown:
        state = states[binding.queue]
        reason = capability_overrun(state, growth)
        if reason:
            out.append(Hold(binding.key, "capacity", f"{reason} after its request grew since admission"))
        else:
            _charge(state, growth)
    return tuple(sorted(out, key=lambda hold: hold.binding))


__all__ = ["admission_cycle", "recheck_admitted"]
