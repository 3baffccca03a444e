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
(its data placement, a closed queue). Queues in queue order, their bindings in binding order. A binding must then
fit every predicate, its fair share too unless the backfill ran (which lends room beyond it).

**Whom.** The candidates are bindings admitted before this cycle (a binding admitted by this very cycle is not
taken back in it; one whose resume is still on its way is not evictable yet), taken in eviction order — **lowest
priority first, then the most recently admitted** (then the most recently created, then the last in binding
order, as a round robin admits them), each only if it frees something the waiting binding is short of — until it
fits; then each taken one but the last is given back, in reverse order, if the binding still fits without it: the
fewest this order allows. **If it would not fit with every candidate taken, nothing is evicted.** What an
eviction frees: the victim's whole request from its queue and every ancestor, and from the clusters' room only if
Karmada had placed it (``spec.clusters``) — the room a binding not placed yet holds is not in the clusters' summary.

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
from .plugins import Predicate, QueueKey, within

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
    return bool(deserved) and within(deserved, state.allocated, demand)


def _may_take(state: QueueState, total: Mapping[str, int]) -> bool:
    """Whether taking ``total`` from the queue leaves it at or above its deserved share in every resource it frees
    that has a share (and it frees at least one): what it borrowed, and no more (Volcano's rule)."""
    deserved = _deserved(state)
    allocated = state.allocated
    some = False
    for name, amount in total.items():
        limit = deserved.get(name)
        if limit is None or not amount:
            continue
        if allocated.get(name, 0) - amount < limit:
            return False
        some = True
    return some


def _borrowed(state: QueueState, total: Mapping[str, int]) -> str:
    """What the queue uses of its share, in the first resource ``total`` frees that has one (for the reason)."""
    deserved = _deserved(state)
    for name, amount in total.items():
        limit = deserved.get(name)
        if limit is not None and amount:
            return f"{name} {format_milli(state.allocated.get(name, 0))} of its deserved {format_milli(limit)}"
    return ""


def _add(into: dict[str, int], amounts: Mapping[str, int], sign: int = 1) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0) + sign * amount


class _Pass:
    """One preemption pass over a session (module doc).

    What costs is the waiting bindings that find no room: a cycle offers every held binding, and most cannot be
    helped. So each is first checked against an upper bound of what evictions could free for it — its own queue's
    candidates of a lower priority, and what each other queue could give back at most (the least of its candidates'
    requests and what it uses beyond its share), summed per capped queue above it and, for the placed ones, for the
    clusters' room — and only a binding that could fit by that bound has its candidates taken one by one. The
    per-queue bounds change only when a queue's charge does (an eviction, an admission), and are kept up to date
    by difference."""

    def __init__(self, states: Mapping[str, QueueState], session: Session, predicates: Sequence[tuple[str, Predicate]],
                 *, clusters: bool) -> None:
        self.session = session
        self.predicates = predicates
        self.clusters = clusters  # whether the predicates check the clusters' room
        everyone = [_Running(binding, total, state) for state in states.values() for binding, total in state.running
                    if binding.evictable]
        in_eviction_order(everyone)
        self.everyone = everyone  # every candidate of a reclaim, in eviction order
        self.own: dict[int, list[_Running]] = {}  # each queue's own candidates (by the state's id), in eviction order
        for running in everyone:
            self.own.setdefault(id(running.state), []).append(running)
        self.version = 0  # bumped by every eviction: what found no room before may find it now
        #: (queue, priority) → (version, its own candidates of a lower priority summed, of them the placed ones)
        self._own_free: dict[tuple[int, int], tuple[int, dict[str, int], dict[str, int]]] = {}
        # the reclaim bound (class doc): per queue what it could give back, per capped holder the sum under it, and
        # what the placed ones could free in the clusters
        self.states = {id(state): state for state in states.values()}
        self.candidates: dict[int, dict[str, int]] = {}  # per queue: its candidates' whole requests, summed
        self.placed: dict[int, dict[str, int]] = {}  # the same, of the placed ones
        for key, own in self.own.items():
            for running in own:
                _add(self.candidates.setdefault(key, {}), running.total)
                if running.binding.scheduled:
                    _add(self.placed.setdefault(key, {}), running.total)
        self.gives: dict[int, tuple[dict[str, int], dict[str, int]]] = {}  # per queue: (at most, of it placed)
        self.giving = 0  # how many queues could give something back
        self.under: dict[int, dict[str, int]] = {}  # per capped holder: what the queues under it could give
        self.placed_total: dict[str, int] = {}  # what the queues could give of the clusters' room
        for key in self.own:
            self.refresh(self.states[key])

    # --- the bound -------------------------------------------------------------------------------------------

    def refresh(self, state: QueueState) -> None:
        """Recompute what the queue could give back at most, and the sums it is part of, by difference."""
        key = id(state)
        gives: dict[str, int] = {}
        placed: dict[str, int] = {}
        deserved = _deserved(state)
        if state.queue.reclaimable and deserved and key in self.candidates:
            allocated = state.allocated
            beyond = {name: allocated.get(name, 0) - limit for name, limit in deserved.items()}
            if any(amount > 0 for amount in beyond.values()):
                # the candidates that could be taken one by one (each no larger than what the queue uses beyond its
                # share), at most that beyond
                for running in self.own[key]:
                    if running.evicted or any(amount > beyond.get(name, amount) for name, amount
                                              in running.total.items() if amount and name in deserved):
                        continue
                    _add(gives, running.total)
                    if running.binding.scheduled:
                        _add(placed, running.total)
                for into in (gives, placed):
                    for name in list(into):
                        if name in beyond:
                            into[name] = min(into[name], max(beyond[name], 0))
                        if not into[name]:
                            del into[name]
        old = self.gives.get(key)
        if old is not None:
            old_gives, old_placed = old
            if old_gives == gives and old_placed == placed:
                return
            for holder in state.chain:
                if holder.queue.capability:
                    _add(self.under.setdefault(id(holder), {}), old_gives, -1)
            _add(self.placed_total, old_placed, -1)
        for holder in state.chain:
            if holder.queue.capability:
                _add(self.under.setdefault(id(holder), {}), gives)
        _add(self.placed_total, placed)
        self.gives[key] = (gives, placed)
        self.giving += bool(gives) - bool(old is not None and old[0])

    def could_fit(self, state: QueueState, demand: Mapping[str, int], priority: int, *, within: bool,
                  reclaim: bool) -> bool:
        """Whether ``demand`` could fit with everything evictions could free for it (an upper bound)."""
        own_free: dict[str, int] = {}
        own_placed: dict[str, int] = {}
        if within:
            cached = self._own_free.get((id(state), priority))
            if cached is not None and cached[0] == self.version:
                _, own_free, own_placed = cached
            else:
                for running in self.own.get(id(state), ()):
                    if running.binding.priority >= priority:
                        break  # (in eviction order: the lower priorities first)
                    if not running.evicted:
                        _add(own_free, running.total)
                        if running.binding.scheduled:
                            _add(own_placed, running.total)
                self._own_free[(id(state), priority)] = (self.version, own_free, own_placed)
        gives = self.gives.get(id(state), ({}, {}))[0] if reclaim else {}  # (its own: not reclaimed from itself)
        for holder in state.chain:
            capability = holder.queue.capability
            if not capability:
                continue
            under = self.under.get(id(holder), {}) if reclaim else {}
            for name, amount in demand.items():
                limit = capability.get(name)
                if limit is None or not amount:
                    continue
                free = limit - holder.subtree.get(name, 0) + own_free.get(name, 0) + under.get(name, 0) - \
                    gives.get(name, 0)
                if amount > free:
                    return False
        if self.clusters:
            headroom = self.session.headroom
            placed = self.placed_total if reclaim else {}
            for name, amount in demand.items():
                if amount > headroom.get(name, 0) + own_placed.get(name, 0) + placed.get(name, 0):
                    return False
        return True

    # --- charges ---------------------------------------------------------------------------------------------

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

    def _helpful(self, state: QueueState, demand: Mapping[str, int]) -> tuple[tuple[QueueState, ...], bool]:
        """What ``demand`` is short of now: the capped queues of its chain it would pass, and whether the clusters'
        room — an eviction helps only if it frees one of them (or, in its own queue, its fair share)."""
        holders = tuple(holder for holder in state.chain if holder.queue.capability and any(
            amount and (limit := holder.queue.capability.get(name)) is not None
            and holder.subtree.get(name, 0) + amount > limit for name, amount in demand.items()))
        headroom = self.session.headroom
        return holders, self.clusters and any(amount > headroom.get(name, 0) for name, amount in demand.items())

    def evicted(self, running: _Running) -> None:
        """``running`` is evicted for good: no longer a candidate."""
        running.evicted = True
        key = id(running.state)
        _add(self.candidates[key], running.total, -1)
        if running.binding.scheduled:
            _add(self.placed[key], running.total, -1)

    def make_room(self, state: QueueState, binding: Binding, demand: Mapping[str, int],
                  policy: QueuePolicy) -> list[tuple[_Running, str, str]] | None:
        """The candidates to evict so that ``binding`` fits — each with the policy that allows it and, for a
        reclaim, what its queue uses of its share — or none when it would not fit with all of them; None when it
        fits already (evictions elsewhere left room: the next cycle admits it). The chosen ones are left uncharged,
        every other as it was."""
        priority = binding.priority
        within = policy.within_queue == LOWER_PRIORITY
        reclaim = policy.reclaim != NEVER and _within_share(state, demand)
        if not (within or reclaim) or not self.could_fit(state, demand, priority, within=within, reclaim=reclaim):
            return []
        if self._fits(state, demand):
            return None
        if reclaim and self.giving:
            pool = self.everyone
        else:  # its own queue's, of a lower priority (no other queue gives anything back): a prefix of the order
            own = self.own.get(id(state), [])
            pool = own[:bisect_left(own, priority, key=lambda r: r.order[0])]
        holders, clusters = self._helpful(state, demand)
        taken: list[tuple[_Running, str, str]] = []
        for running in pool:
            if running.evicted:
                continue
            victim, owner = running.binding, running.state
            if not ((clusters and victim.scheduled) or any(holder in owner.chain for holder in holders)
                    or (owner is state and not holders and not clusters)):  # (the last: its fair share)
                continue
            if owner is state:
                if not within or victim.priority >= priority:
                    continue
                taken.append((running, PREEMPT, ""))
            else:
                if not owner.queue.reclaimable or (policy.reclaim != ANY and victim.priority >= priority) or \
                        not _may_take(owner, running.total):
                    continue
                taken.append((running, RECLAIM, _borrowed(owner, running.total)))
            self._move(running, -1)
            if self._fits(state, demand):
                break
            holders, clusters = self._helpful(state, demand)
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
    checked = {name for name, _ in predicates} | {"proportion"}  # the holds an eviction may lift
    evictions: list[Eviction] = []
    for state in sorted(active, key=queue_key):
        policy = config.policy(state.queue.name)
        own = work.own.get(id(state), [])
        if policy.reclaim == NEVER and not own:
            continue  # nothing of its own to take, and nothing of others'
        # what found no room since the last eviction: one of no higher priority asking no less finds none either
        # (fewer candidates, more to free). By request (a queue's bindings ask for a few shapes), the highest
        # priority that found none; and the last few failures, for a larger request of another shape
        failed: dict[tuple[tuple[str, int], ...], int] = {}
        lately: list[tuple[int, Mapping[str, int]]] = []
        fits: set[tuple[tuple[str, int], ...]] = set()  # requests that fit already (no eviction is for them)
        seen = work.version
        # held for what an eviction could change (not admitted, not held for its validity), and with something to
        # take: of a higher priority than its queue's lowest candidate, unless another queue may give back
        lowest = own[0].order[0] if own else None
        arrivals = [(binding, total) for _, binding, total in state.offered
                    if (hold := held.get(binding.key)) is not None and hold.plugin in checked
                    and ((lowest is not None and binding.priority > lowest) or policy.reclaim != NEVER)]
        for binding, total in arrivals:
            if binding.key not in held:
                continue  # (admitted since: it fit in room an eviction left)
            priority = binding.priority
            if not work.giving and (lowest is None or priority <= lowest):
                continue  # nothing of a lower priority in its queue, and no other queue gives back
            demand = total if whole else binding.request
            if seen != work.version:
                failed, lately, fits, seen = {}, [], set(), work.version
            shape = tuple(demand.items())
            if failed.get(shape, priority - 1) >= priority or shape in fits or \
                    any(priority <= most and _covers(demand, least) for most, least in lately):
                continue
            taken = work.make_room(state, binding, demand, policy)
            if not taken:
                if taken is not None:  # (None: it fits already, which says nothing of larger requests)
                    failed[shape] = max(failed.get(shape, priority), priority)
                    lately = [*lately[-3:], (priority, demand)]
                else:
                    fits.add(shape)
                continue
            work.version += 1
            for running, allowed, borrowed in taken:
                work.evicted(running)
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
            for changed in {id(state): state, **{id(r.state): r.state for r, _, _ in taken}}.values():
                work.refresh(changed)
    return evictions


def _covers(demand: Mapping[str, int], least: Mapping[str, int]) -> bool:
    """Whether ``demand`` asks at least ``least`` of every resource ``least`` asks."""
    return all(demand.get(name, 0) >= amount for name, amount in least.items())


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
