"""The admission plugins (``priority``, ``gang``, ``capacity``, ``proportion``, ``drf``, ``datadependency``).

A plugin is opened on a :class:`~tether.core.admission.model.Session` and contributes any of: a queue order key, a
binding order key (lower sorts first; :func:`open_plugins` lays the keys out in tier order, so the first plugin
that tells two items apart decides), a validity check (a hold that does not depend on what the session admits)
and a predicate (a fit check against what it has admitted so far). A check returns the reason it holds, or ``""``.

Keys are numbers on purpose: ``-priority`` and shares are ints and floats, which compare in C. A share is a ratio
of integers, and IEEE division is correctly rounded, so it is the same on every machine; two shares that differ
by less than a float's precision tie and fall through to the next key — deterministically.

The plugins and the session meet through :mod:`.model`, the types both use; this module never imports the
session (which opens the plugins) nor the configuration parser (which looks plugins up by name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..quantity import format_milli
from ..world.admission_state import AdmissionConfig, PluginOption
from .model import Binding, QueueState, Session

QueueKey = Callable[["QueueState"], Any]
BindingKeyFn = Callable[["Binding"], Any]
Validity = Callable[["Binding"], str]
Predicate = Callable[["QueueState", Mapping[str, int]], str]


class AdmissionPlugin:
    """The base plugin: contributes nothing. ``arguments``: the argument names it accepts and their types."""

    name: ClassVar[str] = ""
    arguments: ClassVar[Mapping[str, type]] = {}
    orders_queues: ClassVar[bool] = False
    orders_bindings: ClassVar[bool] = False
    validates: ClassVar[bool] = False
    fits: ClassVar[bool] = False

    def __init__(self, session: Session, option: PluginOption) -> None:
        self.session = session
        self.option = option

    def session_opened(self) -> None:
        """Called once every eligible binding is in its queue's pending list (before any admission)."""

    # The four contributions below are asked only of a plugin whose flag says it makes them (orders_queues,
    # orders_bindings, validates, fits); a plugin sets the flag and overrides the method together.

    def queue_key(self, state: QueueState) -> float:
        """(``orders_queues``) The queue's sort key in this plugin's order: smaller goes first."""
        raise NotImplementedError

    def binding_key(self, binding: Binding) -> float:
        """(``orders_bindings``) The binding's sort key within its queue: smaller goes first."""
        raise NotImplementedError

    def valid(self, binding: Binding) -> str:
        """(``validates``) Why the binding may not be admitted at all this cycle; empty when it may."""
        raise NotImplementedError

    def fit(self, state: QueueState, demand: Mapping[str, int]) -> str:
        """(``fits``) Why ``demand`` does not fit the queue now; empty when it does."""
        raise NotImplementedError


class PriorityPlugin(AdmissionPlugin):
    """Higher ``Queue.spec.priority`` first; higher binding priority first (see ``binding_priority``)."""

    name = "priority"
    orders_queues = True
    orders_bindings = True

    def queue_key(self, state: QueueState) -> float:
        return -state.queue.priority

    def binding_key(self, binding: Binding) -> float:
        return -binding.priority


class GangPlugin(AdmissionPlugin):
    """All or nothing: the predicates check the whole request (request * replicas * copies), not one replica."""

    name = "gang"

    def __init__(self, session: Session, option: PluginOption) -> None:
        super().__init__(session, option)
        if option.enable_predicate:
            session.whole_request = True


def capability_overrun(state: QueueState, demand: Mapping[str, int]) -> str:
    """``queue q1: cpu 10/8`` when ``demand`` on top of what the queue's subtree — or an ancestor's — already
    uses passes its capability; ``""`` when it fits. A resource a capability does not name is not capped.

    Most calls fit, so a first pass only checks ``state.limits`` (every capped resource of the chain, flattened
    when the session opens) and builds nothing; the reason, in chain then demand order, only when one is over."""
    for subtree, capped, most in state.limits:
        asked = demand.get(capped)
        if asked and subtree.get(capped, 0) + asked > most:
            break
    else:
        return ""
    for holder in state.chain:
        capability = holder.queue.capability
        if not capability:
            continue
        used = holder.subtree
        for name, amount in demand.items():
            limit = capability.get(name)
            if limit is not None and amount and used.get(name, 0) + amount > limit:
                whose = "" if holder is state else f" (ancestor of {state.queue.name})"
                return (f"queue {holder.queue.name}{whose}: {name} "
                        f"{format_milli(used.get(name, 0) + amount)}/{format_milli(limit)}")
    return ""


class CapacityPlugin(AdmissionPlugin):
    """Hard limits: the queue's ``spec.capability`` and every ancestor's (through ``spec.parent``), and — unless
    ``arguments: {clusters: false}`` — what the ready clusters have free (allocatable - allocated, less what this
    session admitted). A resource no ready cluster reports has no room at all."""

    name = "capacity"
    arguments = {"clusters": bool}
    fits = True

    def __init__(self, session: Session, option: PluginOption) -> None:
        super().__init__(session, option)
        self.clusters = bool(option.arguments.get("clusters", True))

    def fit(self, state: QueueState, demand: Mapping[str, int]) -> str:
        # capability_overrun's first pass, inlined: this runs for every binding offered, and most fit
        for subtree, capped, most in state.limits:
            asked = demand.get(capped)
            if asked and subtree.get(capped, 0) + asked > most:
                return capability_overrun(state, demand)
        if not self.clusters:
            return ""
        session = self.session
        if not session.ready_clusters:
            return "no ready cluster"
        headroom = session.headroom
        for name, amount in demand.items():
            free = headroom.get(name, 0)
            if amount > free:
                return f"clusters: {name} {format_milli(amount)}/{format_milli(max(free, 0))} free"
        return ""


class ProportionPlugin(AdmissionPlugin):
    """Weighted fair share. Each queue *deserves* a share of the ready clusters' total, per resource, by
    water-filling: every queue that still wants more gets ``remaining * weight / Σ weights`` of what is left,
    never more than it asks for (its allocated plus its eligible pending requests) nor than its capability (and
    its ancestors'); what a satisfied queue does not take is shared again among the others. A queue starts from its
    ``guarantee`` (reserved, so never below it); an explicit ``spec.deserved`` replaces the computed amount for the
    resources it names. Because the amount asked for caps the share, a queue may use what no one else wants:
    "over its share" only ever means "taking what another queue that wants it deserves".

    Queues are ordered by share = max over resources of allocated / deserved, lowest first; a binding is held
    when its queue's allocated plus the binding's demand would pass what the queue deserves."""

    name = "proportion"
    orders_queues = True
    fits = True

    def session_opened(self) -> None:
        states = list(self.session.states.values())
        for resource, total in sorted(self.session.total.items()):
            self._water_fill(states, resource, total)

    @staticmethod
    def _water_fill(states: list[QueueState], resource: str, total: int) -> None:
        deserved: dict[str, int] = {}
        cap: dict[str, int] = {}
        for state in states:
            queue = state.queue
            capabilities = [c for c in (h.queue.capability.get(resource) for h in state.chain) if c is not None]
            capability = min(capabilities) if capabilities else None
            guarantee = queue.guarantee.get(resource, 0)
            explicit = queue.deserved.get(resource)
            if explicit is not None:  # fixed: takes no part in the filling
                deserved[queue.name] = cap[queue.name] = max(
                    explicit if capability is None else min(explicit, capability), guarantee)
            else:
                wanted = state.request.get(resource, 0)
                deserved[queue.name] = guarantee
                cap[queue.name] = max(wanted if capability is None else min(wanted, capability), guarantee)
        remaining = max(total - sum(deserved.values()), 0)
        active = [s for s in states if deserved[s.queue.name] < cap[s.queue.name]]
        while remaining > 0 and active:
            weights = sum(max(s.queue.weight, 1) for s in active)
            given = 0
            for state in active:  # by name: the integer remainders fall the same way on every run
                name = state.queue.name
                add = min(remaining * max(state.queue.weight, 1) // weights, cap[name] - deserved[name])
                deserved[name] += add
                given += add
            if not given:
                break  # what is left is less than one milli-unit per queue
            remaining -= given
            active = [s for s in active if deserved[s.queue.name] < cap[s.queue.name]]
        for state in states:
            state.deserved[resource] = deserved[state.queue.name]

    def queue_key(self, state: QueueState) -> float:
        share = 0.0
        allocated = state.allocated
        for resource, deserved in state.deserved.items():
            used = allocated.get(resource, 0)
            if used:
                ratio = used / deserved if deserved else float("inf")
                if ratio > share:  # (max() without the call: this runs after every admission)
                    share = ratio
        return share

    def within_share(self, state: QueueState, demand: Mapping[str, int]) -> bool:
        """:meth:`fit` without its reason (the session asks it of bindings another plugin held)."""
        return within(state.deserved, state.allocated, demand)

    def overrun(self, state: QueueState, demand: Mapping[str, int]) -> tuple[str, int, int] | None:
        """:meth:`fit`'s hold as numbers — (resource, what the queue would use, what it deserves) — or None: the
        session writes the reason (:meth:`over_share_reason`) only for the holds that stand."""
        deserved = state.deserved
        allocated = state.allocated
        for resource, amount in demand.items():
            limit = deserved.get(resource)
            if limit is not None and amount and allocated.get(resource, 0) + amount > limit:
                return resource, allocated.get(resource, 0) + amount, limit
        return None

    @staticmethod
    def over_share_reason(queue: str, resource: str, would_use: int, deserved: int) -> str:
        return f"queue {queue}: {resource} {format_milli(would_use)}/{format_milli(deserved)} over its fair share"

    def fit(self, state: QueueState, demand: Mapping[str, int]) -> str:
        over = self.overrun(state, demand)
        return "" if over is None else self.over_share_reason(state.queue.name, *over)


def within(deserved: Mapping[str, int], allocated: Mapping[str, int], demand: Mapping[str, int]) -> bool:
    """Whether ``allocated`` plus ``demand`` stays within ``deserved`` in every resource it names."""
    for resource, amount in demand.items():
        limit = deserved.get(resource)
        if limit is not None and amount and allocated.get(resource, 0) + amount > limit:
            return False
    return True


class DrfPlugin(AdmissionPlugin):
    """Dominant resource fairness: queues ordered by their dominant share — the largest, over resources, of
    allocated / the ready clusters' total — lowest first."""

    name = "drf"
    orders_queues = True

    def __init__(self, session: Session, option: PluginOption) -> None:
        super().__init__(session, option)
        # the clusters' total is fixed when the session opens; a resource with none is no one's dominant share
        self.totals = [(resource, total) for resource, total in session.total.items() if total]

    def queue_key(self, state: QueueState) -> float:
        share = 0.0
        allocated = state.allocated
        for resource, total in self.totals:
            used = allocated.get(resource, 0)
            if used:
                ratio = used / total
                if ratio > share:  # (max() without the call: this runs after every admission)
                    share = ratio
        return share


class DataDependencyPlugin(AdmissionPlugin):
    """A workload that reads data tether places is held until tether's placement is on its binding: resumed
    earlier, karmada-scheduler would place it anywhere, and the first placement already propagates it."""

    name = "datadependency"
    validates = True

    def valid(self, binding: Binding) -> str:
        return "waiting for data placement" if binding.data_dependent and not binding.placement_injected else ""


PLUGINS: dict[str, type[AdmissionPlugin]] = {
    plugin.name: plugin
    for plugin in (PriorityPlugin, GangPlugin, CapacityPlugin, ProportionPlugin, DrfPlugin, DataDependencyPlugin)
}


class PluginSet:
    """The opened plugins of one session and what they contribute, in tier order."""

    def __init__(self, plugins: list[AdmissionPlugin]) -> None:
        self.plugins = plugins
        options = [(p, p.option) for p in plugins]
        self.validators: list[tuple[str, Validity]] = [
            (p.name, p.valid) for p, o in options if p.validates and o.enable_predicate]
        self.predicates: list[tuple[str, Predicate]] = [
            (p.name, p.fit) for p, o in options if p.fits and o.enable_predicate]
        queue_keys = [p.queue_key for p, o in options if p.orders_queues and o.enable_queue_order]
        binding_keys = [p.binding_key for p, o in options if p.orders_bindings and o.enable_binding_order]
        #: the plugin whose holds mean "over its fair share" (a backfill may lift them); None without one
        self.fair_share: ProportionPlugin | None = next(
            (p for p, o in options if isinstance(p, ProportionPlugin) and o.enable_predicate), None)
        self.queue_sort_key = _queue_sort_key(queue_keys)
        self.binding_sort_key = _binding_sort_key(binding_keys)
        #: whether a predicate checks the clusters' room (capacity, unless ``clusters: false``)
        self.checks_clusters = any(isinstance(p, CapacityPlugin) and p.clusters and o.enable_predicate
                                   for p, o in options)

    def session_opened(self) -> None:
        for plugin in self.plugins:
            plugin.session_opened()


def _queue_sort_key(keys: Sequence[Callable[[QueueState], float]]) -> QueueKey:
    # ties end in the queue's creation time, UID and name (QueueState.tiebreak): a total order
    if not keys:
        return lambda state: state.tiebreak
    if len(keys) == 1:
        only = keys[0]
        return lambda state: (only(state), state.tiebreak)
    if len(keys) == 3:  # the default tiers (priority; drf, proportion): computed after every admission, so no list
        first, second, third = keys
        return lambda state: (first(state), second(state), third(state), state.tiebreak)
    return lambda state: (*[key(state) for key in keys], state.tiebreak)


def _binding_sort_key(keys: Sequence[Callable[[Binding], float]]) -> BindingKeyFn:
    # ties end in the binding's creation time, UID and key: a total order
    if not keys:
        return lambda b: (b.creation_ms, b.uid, b.key)
    if len(keys) == 1:
        only = keys[0]
        return lambda b: (only(b), b.creation_ms, b.uid, b.key)
    return lambda b: (*[key(b) for key in keys], b.creation_ms, b.uid, b.key)


def open_plugins(session: Session, config: AdmissionConfig) -> PluginSet:
    """Open every configured plugin on ``session``, in tier order."""
    return PluginSet([PLUGINS[option.name](session, option) for tier in config.tiers for option in tier.plugins])


__all__ = [
    "PLUGINS", "AdmissionPlugin", "CapacityPlugin", "DataDependencyPlugin", "DrfPlugin", "GangPlugin", "PluginSet",
    "PriorityPlugin", "ProportionPlugin", "capability_overrun", "open_plugins", "within",
]
