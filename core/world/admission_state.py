"""What the world keeps for queue admission: Queues, PriorityClasses, cluster capacity, workloads' queues, the
admission view of every ResourceBinding and the admission configuration (``World.admission``).

The fold fills it (``projections.admission_fold``, which says what is kept and when); the admission decider and the
ResourceBinding webhook (``core.admission``) read it. The parsed configuration (:class:`AdmissionConfig`, with its
default :data:`DEFAULT_ADMISSION_CONFIG`) and the Volcano :class:`Queue` are the session's inputs as much as the
world's, and the world holds them, so their types are here, below the admission room that parses and uses them.

``admitted`` holds the bindings tether has issued a :class:`~tether.core.commands.ResumeBinding` for and has not
yet seen unsuspended: they count as admitted from the moment the command is issued, so a retried resume, a cycle
before its outcome, or a restart in between never admits a binding twice or charges its queue twice. ``evicting``
is its mirror for :class:`~tether.core.commands.EvictBinding`: a binding counts as evicted (no longer charged) from
the moment its eviction is issued until it is seen suspended. ``admitted_at`` keeps when each binding was last
admitted, for the eviction order (the most recently admitted goes first).
``position`` is the offset of the last event folded: the webhook records it with each decision, so that
``tether replay --diff`` can re-derive the decision from the world as it was then.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..commands import CheckStatus, EvictBinding
from ..kube import ObjectRef
from ..quantity import ResourceList
from .admission_checks import NO_CHECKS, ChecksConfig

CYCLE_PURPOSE = "admission-cycle"  # the timer of the admission decider's cycles
CYCLE_SUBJECT = "Admission//cycle"  # its subject


class Queue(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A Volcano Queue (``scheduling.volcano.sh/v1beta1``), amounts in milli-units."""

    name: str
    parent: str = ""
    priority: int = 0
    weight: int = 1
    capability: ResourceList = {}
    deserved: ResourceList = {}
    guarantee: ResourceList = {}
    open: bool = True  # status.state Open (a Closed or Closing queue admits nothing)
    creation_ms: int = 0
    uid: str = ""
    reclaimable: bool = True  # spec.reclaimable: false keeps what it borrowed from other queues' reclaim


class PluginOption(msgspec.Struct, frozen=True, kw_only=True):
    """One plugin of a tier, with Volcano's switches for what it contributes."""

    name: str
    enable_queue_order: bool = True
    enable_binding_order: bool = True  # Volcano's ``enableJobOrder``
    enable_predicate: bool = True  # predicates and validity checks
    arguments: dict[str, Any] = {}


class Tier(msgspec.Struct, frozen=True):
    plugins: tuple[PluginOption, ...]


#: Kueue's words for whom a queue's arrival may evict: ``withinQueue`` (Kueue's ``withinClusterQueue``) among its own
#: queue's admitted bindings, ``reclaim`` (Kueue's ``reclaimWithinCohort``) among what other queues borrowed beyond
#: their deserved share. ``Never`` is the default of both.
NEVER, LOWER_PRIORITY, ANY = "Never", "LowerPriority", "Any"
WITHIN_QUEUE_POLICIES = (NEVER, LOWER_PRIORITY)
RECLAIM_POLICIES = (NEVER, LOWER_PRIORITY, ANY)


class QueuePolicy(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's preemption policy (the admission ConfigMap's ``configurations``: ``preempt``'s ``queues``). It
    takes effect with Volcano's action of the same purpose in ``actions``: ``preempt`` for ``within_queue``,
    ``reclaim`` for ``reclaim``."""

    within_queue: str = NEVER
    reclaim: str = NEVER


class AdmissionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed ``volcano-scheduler.conf``. ``ignored``: Volcano plugins that act on pods and nodes (the member
    clusters' own schedulers do that), accepted so a Volcano configuration can be used as it is. ``policies``: the
    queues' preemption policies, by queue name (a queue not named: ``Never`` for both)."""

    actions: tuple[str, ...]
    tiers: tuple[Tier, ...]
    ignored: tuple[str, ...] = ()
    policies: dict[str, QueuePolicy] = {}

    def policy(self, queue: str) -> QueuePolicy:
        """The queue's policy, as its actions let it act: a policy whose action is not listed is ``Never``."""
        policy = self.policies.get(queue)
        if policy is None:
            return _NO_POLICY
        within = policy.within_queue if "preempt" in self.actions else NEVER
        reclaim = policy.reclaim if "reclaim" in self.actions else NEVER
        if (within, reclaim) == (policy.within_queue, policy.reclaim):
            return policy
        return QueuePolicy(within_queue=within, reclaim=reclaim)

    def evicts(self) -> bool:
        """Whether any queue may evict (a policy other than Never, with its action listed)."""
        return any(self.policy(name) != _NO_POLICY for name in self.policies)


_NO_POLICY = QueuePolicy()


#: ``volcano-scheduler.conf`` when the admission ConfigMap gives none (``core.admission.config`` parses its YAML,
#: :data:`~tether.core.admission.config.DEFAULT_ADMISSION_CONFIG_YAML`, to exactly this; a test holds them together).
DEFAULT_ADMISSION_CONFIG = AdmissionConfig(
    actions=("enqueue", "allocate", "backfill"),
    tiers=(Tier(plugins=(PluginOption(name="priority"), PluginOption(name="gang"),
                         PluginOption(name="datadependency"))),
           Tier(plugins=(PluginOption(name="drf"), PluginOption(name="capacity"), PluginOption(name="proportion")))),
)
#: How long a binding may be held for its data (``--max-hold``; ``core.admission.data_hold``) without a setting.
DEFAULT_MAX_HOLD_MS = 10 * 60 * 1000


class QueueManaged(msgspec.Struct, frozen=True, kw_only=True):
    """Which bindings go through queue admission: ``kinds`` as ``group/Kind`` (``apps/Deployment``,
    ``batch.volcano.sh/Job``), ``namespaces`` (empty: all). No kinds: none (admission then only holds bindings
    for their data)."""

    kinds: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()

    def manages(self, workload_kind: str, namespace: str) -> bool:
        return workload_kind in self.kinds and (not self.namespaces or namespace in self.namespaces)


class Component(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One pod template of a multi-template workload (Karmada's ``spec.components``): its replicas, each asking
    ``request``."""

    name: str
    replicas: int
    request: ResourceList = {}


class AdmissionBinding(msgspec.Struct, frozen=True, kw_only=True):
    """A ResourceBinding as admission reads it (amounts in milli-units). With ``components`` (Karmada's
    ``spec.components``, several pod templates) the binding asks their sum, and ``request``/``replicas`` (the legacy
    single template) are not read."""

    ref: ObjectRef
    resource_version: str
    workload: str  # the data-dependency projection's workload key: group/Kind/namespace/name
    workload_kind: str  # group/Kind
    suspended: bool
    request: ResourceList = {}
    replicas: int = 1
    divided: bool = False
    target_clusters: tuple[str, ...] = ()  # spec.clusters names (scheduled)
    affinity_names: tuple[str, ...] = ()  # placement.clusterAffinity.clusterNames
    affinity_exclude: tuple[str, ...] = ()
    schedule_priority: int | None = None
    creation_ms: int = 0
    hold: str | None = None  # the tether.dev/admission annotation (None: absent)
    overrun: str | None = None
    released: str | None = None  # the tether.dev/admission-released annotation
    admitted_request: ResourceList | None = None
    problem: str = ""  # why the spec cannot be admitted as it is (a malformed quantity)
    components: tuple[Component, ...] = ()
    dispatching_suspended: bool = False  # spec.suspension.dispatching (Karmada withholds its Works' changes)
    evicted_for: str = ""  # the tether.dev/evicted-for annotation: the binding it made room for (namespace/name)


class WorkloadQueue(msgspec.Struct, frozen=True):
    queue: str
    priority_class: str


class QueueObserved(msgspec.Struct, frozen=True, kw_only=True):
    ref: ObjectRef
    queue: Queue
    status: dict[str, Any] = {}  # allocated/pending/running/inqueue as last seen
    problem: str = ""


class ObservedCluster(msgspec.Struct, frozen=True, gc=False):
    """A Karmada Cluster as last observed: its status as the API wrote it (JSON), read by
    ``core.admission.objects.cluster_capacity`` when a cycle needs it. (Plain bytes rather than the observation's
    raw JSON field: the state is also written into msgpack snapshots.)"""

    name: str
    status: bytes


class AdmissionState(msgspec.Struct):
    queues: dict[str, QueueObserved] = {}
    priority_classes: dict[str, int] = {}
    default_priority: int = 0
    default_priority_class: str = ""
    clusters: dict[str, ObservedCluster] = {}  # Karmada Clusters as observed (cluster_capacities reads them)
    workloads: dict[str, WorkloadQueue] = {}  # workload key → its queue and PriorityClass name
    bindings: dict[str, AdmissionBinding] = {}
    config: AdmissionConfig = DEFAULT_ADMISSION_CONFIG
    config_error: str = ""
    managed: QueueManaged = QueueManaged()
    admitted: dict[str, str] = {}  # binding key → id of the ResumeBinding issued (until seen unsuspended)
    admitted_at: dict[str, int] = {}  # binding key → when its ResumeBinding was issued (the deciding event's time)
    evicting: dict[str, EvictBinding] = {}  # binding key → the EvictBinding issued (until seen suspended)
    position: int = 0  # offset of the last event folded
    cycle_due: int = 0  # fire time of the armed admission-cycle timer (0: none armed)
    max_hold_ms: int = DEFAULT_MAX_HOLD_MS  # the bound of a hold for data (SettingsApplied; core.admission.data_hold)
    checks_config: ChecksConfig = NO_CHECKS  # the admission checks each queue names (admission_checks.py)
    checks: dict[str, tuple[CheckStatus, ...]] = {}  # binding key → its checks, as last decided (noted on issue)


__all__ = [
    "ANY", "CYCLE_PURPOSE", "CYCLE_SUBJECT", "DEFAULT_ADMISSION_CONFIG", "DEFAULT_MAX_HOLD_MS", "LOWER_PRIORITY",
    "NEVER", "RECLAIM_POLICIES", "WITHIN_QUEUE_POLICIES", "AdmissionBinding", "AdmissionConfig", "AdmissionState",
    "Component", "ObservedCluster", "PluginOption", "Queue", "QueueManaged", "QueueObserved", "QueuePolicy", "Tier",
    "WorkloadQueue",
]
