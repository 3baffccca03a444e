"""The types admission's session and its plugins share: bindings as admission sees them, the queues' state within
one session, and what a cycle decides. (A Volcano Queue and the parsed configuration are held by the world, so their
types are ``core.world.admission_state``'s.)

They live apart from :mod:`.session` (the cycle) and :mod:`.plugins` (the contributions) so that both import
them and neither imports the other for its types: the session opens the plugins, the plugins read the session's
:class:`QueueState` and :class:`Session`. Amounts are milli-units (``core.quantity``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NewType

import msgspec

from ..quantity import ResourceList, scale
from ..world.admission_state import Queue

QueueName = NewType("QueueName", str)
BindingKey = NewType("BindingKey", str)
"""A ResourceBinding as ``namespace/name``."""

DEFAULT_QUEUE = QueueName("default")
#: Volcano's implicit root of the queue hierarchy: ``spec.parent: root`` means top-level unless a Queue of that
#: name exists (then its capability caps the whole tree).
ROOT_QUEUE = "root"


class Binding(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A ResourceBinding as admission sees it.

    ``request`` is ``spec.replicaRequirements.resourceRequest`` (one replica); ``copies`` is 1 for a Divided
    placement and, for Duplicated, the number of clusters that each run every replica. ``admitted_request`` is the
    whole request recorded when tether admitted it (None: not recorded), for :func:`recheck_admitted`.
    """

    key: str
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    creation_ms: int = 0
    uid: str = ""
    request: ResourceList = {}
    replicas: int = 1
    copies: int = 1
    suspended: bool = True
    data_dependent: bool = False  # the workload has data-source claims (tether places it next to its data)
    placement_injected: bool = False  # tether's data placement is on the binding
    admitted_request: ResourceList | None = None
    #: a workload of several pod templates (Karmada's spec.components): what one copy of it asks, every
    #: component's replicas x request (``request`` is then one replica of each, what gang-less admission checks)
    whole: ResourceList | None = None
    # --- what eviction reads (core.admission.preemption) ---
    admitted_ms: int = 0  # when it was admitted (0: not known): the most recently admitted is evicted first
    scheduled: bool = False  # Karmada placed it (spec.clusters): its eviction frees room in the clusters too
    evictable: bool = True  # False while its resume is on its way (it is evicted once seen admitted, not before)
    evicted_for: str = ""  # evicted for this binding (its key): held while that one waits

    def total_request(self) -> ResourceList:
        """The whole request: per-replica request * replicas * copies (for several pod templates, the sum of
        their replicas * requests, * copies)."""
        if self.whole is not None:
            return scale(self.whole, self.copies)
        return scale(self.request, self.replicas * self.copies)


class ClusterCapacity(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A Karmada Cluster's ``status.resourceSummary`` (``allocated`` should include ``allocating``)."""

    name: str
    allocatable: ResourceList = {}
    allocated: ResourceList = {}
    ready: bool = True


class Hold(msgspec.Struct, frozen=True, gc=False):
    """Why a binding stays suspended (or, from :func:`recheck_admitted`, why an admitted one overruns)."""

    binding: str
    plugin: str
    reason: str


class QueueStatus(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A queue after the cycle: what its admitted bindings use, how many wait and for how much."""

    name: str
    allocated: ResourceList
    admitted: int
    resumed: int
    pending: int
    pending_request: ResourceList
    deserved: ResourceList = {}


class Eviction(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """An admitted binding whose admission a cycle takes back to make room for ``for_binding``: ``policy`` is
    ``preempt`` (the same queue, ``withinQueue``) or ``reclaim`` (what its queue borrowed beyond its deserved
    share); ``reason`` says so for the binding's hold annotation and Event."""

    binding: str
    for_binding: str
    queue: str
    policy: str
    reason: str


class AdmissionOutcome(msgspec.Struct, frozen=True, gc=False):
    """``resume``: bindings to unsuspend, in admission order; ``held``: every other suspended binding with its
    reason, by key; ``queues``: by name; ``evicted``: the admitted bindings evicted to make room, in the order
    decided (each binding they made room for is in ``resume``, after the round robin's)."""

    resume: tuple[str, ...]
    held: tuple[Hold, ...]
    queues: tuple[QueueStatus, ...]
    evicted: tuple[Eviction, ...] = ()


# --- within one session -----------------------------------------------------------------------------------


class QueueState:
    """A queue within one session (mutable: the session charges it as it admits)."""

    __slots__ = ("admitted", "allocated", "chain", "deferred", "deserved", "invalid_request", "limits", "offered",
                 "pending", "problem", "queue", "request", "resumed", "running", "subtree", "tiebreak", "waiting")

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.chain: tuple[QueueState, ...] = (self,)  # itself, then its ancestors up to the root
        #: (subtree, resource, capability) for every capped resource of the chain (capability_overrun's fast path)
        self.limits: tuple[tuple[ResourceList, str, int], ...] = ()
        self.problem = "" if queue.open else f"queue {queue.name} is not open"
        self.allocated: ResourceList = {}  # its own admitted bindings (proportion, drf, status)
        self.subtree: ResourceList = {}  # its own and its descendants' (capacity)
        self.request: ResourceList = {}  # allocated + every eligible suspended binding's whole request
        self.deserved: ResourceList = {}
        self.pending: list[tuple[Any, Binding, ResourceList]] = []  # (sort key, binding, whole request)
        #: pending in binding order, as first offered (kept only when a queue may evict: the arrivals it tries)
        self.offered: list[tuple[Any, Binding, ResourceList]] = []
        #: its bindings admitted before this cycle, with their whole requests (kept only when someone may evict)
        self.running: list[tuple[Binding, ResourceList]] = []
        self.deferred: list[tuple[Any, Binding, ResourceList]] = []  # held by the fair share only (for backfill)
        self.admitted = 0  # bindings admitted, before and in this cycle
        self.resumed = 0  # in this cycle
        self.waiting = 0  # suspended after this cycle
        self.invalid_request: ResourceList = {}  # of the suspended bindings held before the round robin
        self.tiebreak = (queue.creation_ms, queue.uid, queue.name)


class Session:
    """What the plugins see: the queue states, the clusters' total and headroom, and whether gang is on."""

    def __init__(self, states: dict[str, QueueState], clusters: Sequence[ClusterCapacity]) -> None:
        self.states = states
        self.total: ResourceList = {}
        self.headroom: ResourceList = {}
        self.ready_clusters = 0
        for cluster in sorted(clusters, key=lambda c: c.name):
            if not cluster.ready:
                continue
            self.ready_clusters += 1
            for name, amount in cluster.allocatable.items():
                self.total[name] = self.total.get(name, 0) + amount
                free = amount - cluster.allocated.get(name, 0)
                self.headroom[name] = self.headroom.get(name, 0) + max(free, 0)
        self.whole_request = False
