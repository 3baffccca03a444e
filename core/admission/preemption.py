"""Preemption and reclaim: the admitted bindings a cycle evicts to make room for one that waits.

Queue admission decides before a binding is scheduled; these policies let it take an admission back. Each queue
has a policy in Kueue's terms (``core.world.admission_state.QueuePolicy``, parsed from the admission ConfigMap by
``core.admission.config.parse_policies``), turned on by Volcano's action of the same purpose:

* ``withinQueue: LowerPriority`` (action ``preempt``) — a binding of the queue may evict the queue's own admitted
  bindings of a strictly lower priority;
* ``reclaim: LowerPriority | Any`` (action ``reclaim``) — a binding of the queue, if its queue stays within its
  deserved share with it, may evict what *other* queues borrowed beyond their deserved share: an admitted binding
  of a queue that is ``reclaimable`` (Volcano's ``spec.reclaimable``, true unless set false) and that stays at or
  above its deserved share without it (Volcano's rule — what a queue deserves is never taken), of a lower priority
  for ``LowerPriority``, of any for ``Any``. The deserved share is the ``proportion`` plugin's (else the Queue's
  ``spec.deserved``); a queue without one borrows nothing.

**When.** After the round robin (and the backfill), for the bindings still held by a predicate (``capacity``: a
queue's or an ancestor's capability, the clusters' room; ``proportion``) — never for one held for its validity
(its data placement, a closed queue). Queues in queue order, their bindings in binding order.

**Whom.** The candidates are bindings admitted before this cycle (a binding admitted by this very cycle is not
taken back in it; one whose resume is still on its way is not evictable yet), taken in eviction order — **lowest
priority first, then the most recently admitted** (then the most recently created, then the last in binding
order, as a round robin admits them) — until the
waiting binding fits every predicate; then each taken one but the last is given back, in reverse order, if the
binding still fits without it: the fewest this order allows. **If it would not fit with every candidate taken,
nothing is evicted.** What an eviction frees: the victim's whole request from its queue and every ancestor, and
from the clusters' room only if Karmada had placed it (``spec.clusters``) — the room a binding not placed yet holds
is not in the clusters' summary.

**What follows.** The binding it made room for is admitted in the same cycle, and each victim is held with the
reason (``Eviction.reason``); the decider turns them into ``EvictBinding`` (scheduling suspended again, clusters
cleared: Karmada withdraws its Works) and ``ResumeBinding``. An evicted binding carries whom it was evicted for
(``tether.dev/evicted-for``), and the session holds it while that binding waits
(:func:`~tether.core.admission.session.admission_cycle`): it is never readmitted ahead of the binding it made room
for, so it is not evicted twice for the same arrival either — it is not admitted in between.

Pure and deterministic, like the session: every order ends in a binding's key.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence

from ..quantity import ResourceList, format_milli
from ..world.admission_state import ANY, LOWER_PRIORITY, NEVER, AdmissionConfig, QueuePolicy
from .model import Binding, Eviction, Hold, QueueState, Session
from .plugins import Predicate, QueueKey

PREEMPT, RECLAIM = "preempt", "reclaim"


def eviction_key(binding: Binding) -> tuple[int, int, int]:
    """The eviction order: lowest priority first, then the most recently admitted, then the most recently created
    (ties: the last in binding order first — the one a round robin admitted last; see :func:`in_eviction_order`)."""
    return (binding.priority, -binding.admitted_ms, -binding.creation_ms)


def in_eviction_order(running: list[_Running]) -> None:
    """Sort in place by :func:`eviction_key`, ties the last in binding order (uid, then key) first."""
    running.sort(key=lambda r: (r.binding.uid, r.binding.key), reverse=True)
    running.sort(key=lambda r: r.order)  # (stable: the ties keep the order above)


class _Running:
    """An admitted binding of the session that may be evicted."""

    __slots__ = ("binding", "evicted", "order", "state", "total")

    def __init__(self, binding: Binding, total: ResourceList, state: QueueState) -> None:
        self.binding = binding
        self.total = total
        self.state = state
        self.order = eviction_key(binding)
        self.evicted = False


def _deserved(state: QueueState) -> Mapping[str, int]:
    return state.deserved or state.queue.deserved


def _within_share(state: QueueState, demand: Mapping[str, int]) -> bool:
    """Whether the queue stays within its deserved share with ``demand`` admitted (no share: it is not)."""
    deserved = _deserved(state)
    if not deserved:
        return False
    allocated = state.allocated
    for name, amount in demand.items():
        limit = deserved.get(name)
        if limit is not None and amount and allocated.get(name, 0) + amount > limit:
            return False
    return True


def _borrowed(state: QueueState, total: Mapping[str, int]) -> str:
    """Whether taking ``total`` from the queue leaves it at or above its deserved share in every resource it frees
    (and it frees at least one with a share): the numbers of the first, for the reason; "" when it may not."""
    deserved = _deserved(state)
    allocated = state.allocated
    first = ""
    for name, amount in total.items():
        limit = deserved.get(name)
        if limit is None or not amount:
            continue
        used = allocated.get(name, 0)
        if used - amount < limit:
            return ""
        first = first or f"{name} {format_milli(used)} of its deserved {format_milli(limit)}"
    return first


class _Pass:
    """One preemption pass over a session (module doc)."""

    def __init__(self, states: Mapping[str, QueueState], session: Session, predicates: Sequence[tuple[str, Predicate]],
                 *, clusters: bool) -> None:
        self.session = session
        self.predicates = predicates
        self.clusters = clusters  # whether the predicates check the clusters' room
        everyone = [_Running(binding, total, state) for state in states.values() for binding, total in state.running
                    if binding.evictable]
        in_eviction_order(everyone)
        self.everyone = everyone  # every candidate of a reclaim, in eviction order
        self.own: dict[str, list[_Running]] = {}  # each queue's own candidates, in eviction order
        for running in everyone:
            self.own.setdefault(running.state.queue.name, []).append(running)
        self.version = 0  # bumped by every eviction: what found no room before may find it now

    def _move(self, running: _Running, sign: int) -> None:
        """Charge (+1) or uncharge (-1) a candidate to its queue, its ancestors and, if placed, the clusters."""
        state, total = running.state, running.total
        allocated = state.allocated
        headroom = self.session.headroom if running.binding.scheduled else None
        for name, amount in total.items():
            amount *= sign
            allocated[name] = allocated.get(name, 0) + amount
            for holder in state.chain:
                holder.subtree[name] = holder.subtree.get(name, 0) + amount
            if headroom is not None:
                headroom[name] = headroom.get(name, 0) - amount

    def _fits(self, state: QueueState, demand: Mapping[str, int]) -> bool:
        return all(not fit(state, demand) for _, fit in self.predicates)

    def _helps(self, running: _Running, chain: set[int]) -> bool:
        """Whether evicting another queue's ``running`` frees anything the waiting binding (whose queue chain is
        ``chain``) is checked against: a capped queue both are under, or the clusters' room."""
        if running.binding.scheduled and self.clusters:
            return True
        return any(id(holder) in chain and holder.queue.capability for holder in running.state.chain)

    def make_room(self, state: QueueState, binding: Binding, demand: Mapping[str, int],
                  policy: QueuePolicy) -> list[tuple[_Running, str, str]]:
        """The candidates to evict so that ``binding`` fits — each with the policy that allows it and, for a
        reclaim, what its queue uses of its share — or none when it would not fit with all of them. The chosen ones
        are left uncharged, every other as it was."""
        priority = binding.priority
        within = policy.within_queue == LOWER_PRIORITY
        reclaim = policy.reclaim != NEVER and _within_share(state, demand)
        if not within and not reclaim:
            return []
        if reclaim:
            pool = self.everyone
        else:  # its own queue's, of a lower priority: a prefix of the eviction order
            own = self.own.get(state.queue.name, [])
            pool = own[:bisect_left(own, priority, key=lambda r: r.order[0])]
        chain = {id(holder) for holder in state.chain}
        taken: list[tuple[_Running, str, str]] = []
        for running in pool:
            if running.evicted:
                continue
            victim = running.binding
            if running.state is state:
                if not within or victim.priority >= priority:
                    continue
                taken.append((running, PREEMPT, ""))
            else:
                if not running.state.queue.reclaimable or (policy.reclaim != ANY and victim.priority >= priority):
                    continue
                if not self._helps(running, chain):
                    continue
                borrowed = _borrowed(running.state, running.total)
                if not borrowed:
                    continue
                taken.append((running, RECLAIM, borrowed))
            self._move(running, -1)
            if self._fits(state, demand):
                break
        else:
            for running, _, _ in taken:
                self._move(running, +1)
            return []
        for index in range(len(taken) - 2, -1, -1):  # give back what is not needed, the last taken first
            running = taken[index][0]
            self._move(running, +1)
            if self._fits(state, demand):
                del taken[index]
            else:
                self._move(running, -1)
        return taken


def _reason(victim: Binding, allowed: str, borrowed: str, *, owner: QueueState, binding: Binding,
            state: QueueState, policy: QueuePolicy) -> str:
    arrival = binding.key.split("/", 1)[-1]
    if allowed == PREEMPT:
        return (f"queue {state.queue.name}: evicted for {arrival} (priority {binding.priority} > {victim.priority}; "
                f"withinQueue: {policy.within_queue}); waiting until it is admitted")
    return (f"queue {owner.queue.name}: evicted for {arrival} of queue {state.queue.name} (reclaim: {policy.reclaim}; "
            f"priority {binding.priority}, its own {victim.priority}; queue {owner.queue.name} used {borrowed}); "
            f"waiting until it is admitted")


def evict_for_waiting(*, states: Mapping[str, QueueState], session: Session,
                      predicates: Sequence[tuple[str, Predicate]], queue_key: QueueKey, held: dict[str, Hold],
                      resume: list[str], whole: bool, clusters: bool, config: AdmissionConfig) -> list[Eviction]:
    """Evict what the queues' policies allow, to admit bindings the cycle held (module doc): the evictions, in the
    order decided. Admits each binding they made room for (``resume``, its queue charged) and holds each victim
    (``held``, with the reason). ``predicates``: what a binding must fit; ``clusters``: whether they check the
    clusters' room (an eviction of a placed binding frees some)."""
    none = QueuePolicy()
    active = [state for state in states.values() if state.offered and config.policy(state.queue.name) != none]
    if not active:
        return []
    work = _Pass(states, session, predicates, clusters=clusters)
    if not work.everyone:
        return []
    fitting = {name for name, _ in predicates} | {"proportion"}
    evictions: list[Eviction] = []
    for state in sorted(active, key=queue_key):
        policy = config.policy(state.queue.name)
        failed: list[tuple[int, Mapping[str, int]]] = []  # (priority, demand) that found no room, at ``seen``
        seen = work.version
        for _, binding, total in state.offered:
            hold = held.get(binding.key)
            if hold is None or hold.plugin not in fitting:
                continue  # admitted, or held for what no eviction changes
            demand = total if whole else binding.request
            if seen != work.version:
                failed, seen = [], work.version
            if any(binding.priority <= priority and _covers(demand, smaller) for priority, smaller in failed):
                continue  # one of no lower priority, asking no more, found no room: neither will this one
            taken = work.make_room(state, binding, demand, policy)
            if not taken:
                failed.append((binding.priority, demand))
                continue
            work.version += 1
            for running, allowed, borrowed in taken:
                running.evicted = True
                victim, owner = running.binding, running.state
                reason = _reason(victim, allowed, borrowed, owner=owner, binding=binding, state=state, policy=policy)
                evictions.append(Eviction(binding=victim.key, for_binding=binding.key, queue=owner.queue.name,
                                          policy=allowed, reason=reason))
                held[victim.key] = Hold(victim.key, allowed, reason)
                owner.admitted -= 1
                owner.waiting += 1
            _admit(state, binding, total, session.headroom)
            del held[binding.key]
            resume.append(binding.key)
    return evictions


def _covers(demand: Mapping[str, int], smaller: Mapping[str, int]) -> bool:
    """Whether ``demand`` asks at least ``smaller`` of every resource ``smaller`` asks."""
    return all(demand.get(name, 0) >= amount for name, amount in smaller.items())


def _admit(state: QueueState, binding: Binding, total: Mapping[str, int], headroom: dict[str, int]) -> None:
    """Charge the binding that now fits, as the round robin charges an admission."""
    allocated = state.allocated
    for name, amount in total.items():
        allocated[name] = allocated.get(name, 0) + amount
        headroom[name] = headroom.get(name, 0) - amount
        for holder in state.chain:
            holder.subtree[name] = holder.subtree.get(name, 0) + amount
    state.waiting -= 1
    state.admitted += 1
    state.resumed += 1


__all__ = ["PREEMPT", "RECLAIM", "evict_for_waiting", "eviction_key", "in_eviction_order"]
