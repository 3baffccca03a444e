"""Queue admission and pod placement in the synthetic log: what runs the jobs of :mod:`.synthetic_log`'s scenario.

The plain scenario stops at each job's ResourceBinding. :class:`Workloads` adds what a platform running tether with
``--admission`` and member clusters has around it, every event still going through ``step``:

* **the daemon's settings** (``SettingsApplied``, naming the admission ConfigMap) and **that ConfigMap**: Volcano's
  ``volcano-scheduler.conf`` (the tiers of ``ops/webhook/admission-configmap.yaml``) and ``queue-managed``: Volcano
  Jobs, in a share of the namespaces (the teams that opted in); **Volcano Queues** with weights and capabilities,
  and two **PriorityClasses**;
* **each job's Volcano Job** (``batch.volcano.sh/v1alpha1``, its ``spec.queue`` and ``priorityClassName``: what
  admission reads of the workload), observed before its binding;
* **tether's binding webhook**: every ResourceBinding write is decided from the world as folded so far and recorded
  (``BindingAdmissionDecided``); a queue-managed job's binding is created unscheduled and stored suspended, as the
  webhook leaves it. The admission decider's cycles (its ``StartTimer``, fired when the clock passes it) resume
  bindings, set hold reasons and Queue statuses; a resumed binding is scheduled by the Karmada stand-in;
* **member clusters tether watches** (``WATCHED``): their lists started and ended as the daemon appends them, Nodes
  in racks and zones; a job that runs as a **Godel gang** and lands on such a member creates its PodGroup, then its
  pods through **tether's pod webhook** (``PodGateDecided``; the pods gated); the placement decider releases them
  (``ReleasePod``, applied as the member executor does: ``FakeCluster``), and **kube-scheduler** binds each released
  pod to a node its required terms allow, with room (the least allocated);
* **jobs that finish**: a queue-managed or gang job runs for a while once scheduled, then its pods and PodGroup, its
  Volcano Job and its binding are deleted (freeing its queue's share and its nodes).

Deterministic for the simulation's seed; uses the simulation's clock and random generator only when enabled, so
the plain scenario's logs are unchanged.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.adapters.sandbox.kube_emulator.patch import json_patch
from tether.core.admission.config import DEFAULT_ADMISSION_CONFIG_YAML
from tether.core.commands import ReleasePod, ResumeBinding
from tether.core.envelope import CommandRecord, rfc3339
from tether.core.events import (
    CommandSucceeded,
    ListsStarted,
    ObjectsListed,
    PodGateDecided,
    SettingsApplied,
    event_key,
    list_source,
    member_key,
)
from tether.core.keys import (
    HOSTNAME_LABEL,
    INSTANCE_TYPE_LABEL,
    POD_GROUP_ANNOTATION,
    RACK_LABEL,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_TASK_SPEC_LABEL,
    ZONE_LABEL,
)
from tether.core.placement.node_affinity import selector_matches
from tether.core.placement.pod_group_spec import API_VERSION as POD_GROUP_API_VERSION
from tether.core.placement.webhook_decision import decide_pod_gate
from tether.core.world.admission_state import DEFAULT_MAX_HOLD_MS
from tether.core.world.member_state import MemberState

if TYPE_CHECKING:
    from .synthetic_log import Simulation

ADMISSION_CONFIGMAP = ("tether-system", "tether-admission")
PLUGIN_CONFIGMAP = "volcano-global/volcano-global-datasource-plugins"
SCHEDULER_CONF = DEFAULT_ADMISSION_CONFIG_YAML  # (the tiers tether ships by default)
#: name → (weight, capability): Volcano's default queue and three teams' queues.
QUEUES: dict[str, tuple[int, dict[str, str]]] = {
    "default": (1, {}),
    "production": (8, {"cpu": "480", "memory": "1920Gi"}),
    "research": (4, {"cpu": "384", "memory": "1536Gi"}),
    "adhoc": (2, {"cpu": "320", "memory": "1280Gi"}),
}
PRIORITY_CLASSES = (("batch-high", 1000, False), ("batch-normal", 100, True))
#: The member clusters tether watches pods in (the rest run their jobs out of its sight).
WATCHED = ("member1", "member2")
RACKS, NODES_PER_RACK, NODE_CPU = 4, 8, 32
#: The kinds the daemon lists in a member (``adapters/kubernetes/members.py``); Fluid's are empty here.
MEMBER_LISTS = ("Node", "Pod", "Job", "PodGroup", "DataLoad", "DataProcess", "DataMigrate", "DataBackup")
#: How long a job runs once scheduled (sim milliseconds).
RUN_MS = (10_000, 40_000)
VOLCANO_JOB_API = "batch.volcano.sh/v1alpha1"


@dataclass
class Job:
    namespace: str
    name: str
    managed: bool
    queue: str
    replicas: int
    cpu: int  # cores per replica
    gang: bool
    cluster: str = ""  # where it runs, once scheduled
    pods: list[str] = field(default_factory=list)  # member keys of its pods (a gang on a watched member)

    @property
    def binding_key(self) -> str:
        return f"ResourceBinding/{self.namespace}/{self.name}-job"


class Workloads:
    """The actors of the module doc, attached to a :class:`~.synthetic_log.Simulation`."""

    def __init__(self, sim: Simulation, *, namespaces: list[str], queue_managed: float, pod_groups: float,
                 group_sizes: tuple[int, int] = (4, 16)) -> None:
        self.sim = sim
        self.admission = queue_managed > 0
        self.pod_groups = pod_groups
        self.group_sizes = group_sizes
        count = round(len(namespaces) * queue_managed)
        self.managed = sorted({namespaces[i * len(namespaces) // count] for i in range(count)}) if count else []
        teams = [q for q in QUEUES if q != "default"]
        self.queue_of = {ns: teams[i % len(teams)] for i, ns in enumerate(self.managed)}
        self.watched = [c for c in WATCHED if c in sim.clusters] if pod_groups > 0 else []
        self.nodes: dict[str, dict[str, dict[str, str]]] = {}  # member → node → labels
        self.free: dict[tuple[str, str], int] = {}  # (member, node) → free cpu (cores)
        self.bound: dict[str, tuple[str, int]] = {}  # pod member key → (node, cpu)
        self.jobs: dict[str, Job] = {}  # binding key → job, while it waits or runs
        self.running: list[tuple[int, str]] = []  # (end time, binding key), a heap
        sim.fire_timers = True
        sim.binding_webhook = self.admission
        sim.followers.append(self.follow)

    # -- the platform ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """The daemon starts deciding: its settings (with admission) come first in the log."""
        sim = self.sim
        if self.admission:
            namespace, name = ADMISSION_CONFIGMAP
            sim.emit(SettingsApplied(max_hold_ms=DEFAULT_MAX_HOLD_MS, plugin_configmap=PLUGIN_CONFIGMAP,
                                     admission_configmap=f"{namespace}/{name}"), source="daemon", key="*/settings")
            sim.run()

    def objects(self) -> None:
        """After the plain scenario's ConfigMap and Clusters: admission's objects, and the watched members."""
        sim = self.sim
        if self.admission:
            namespace, name = ADMISSION_CONFIGMAP
            managed = "kinds: [batch.volcano.sh/Job]\nnamespaces: [" + ", ".join(self.managed) + "]\n"
            sim.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                     "data": {"volcano-scheduler.conf": SCHEDULER_CONF, "queue-managed": managed}})
            for pc, value, default in PRIORITY_CLASSES:
                sim.put({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": pc},
                         "value": value, "globalDefault": default, "preemptionPolicy": "PreemptLowerPriority"})
            for queue, (weight, capability) in QUEUES.items():
                spec: dict[str, Any] = {"weight": weight, "reclaimable": True}
                if capability:
                    spec["capability"] = dict(capability)
                sim.put({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                         "metadata": {"name": queue, "creationTimestamp": rfc3339(sim.clock)},
                         "spec": spec, "status": {"state": "Open"}})
        for cluster in self.watched:
            self.member(cluster)
        sim.run()

    def member(self, cluster: str) -> None:
        """tether connects the member: its lists start, its Nodes are listed, every list ends."""
        sim = self.sim
        started = ListsStarted(sources=tuple(list_source(kind) for kind in MEMBER_LISTS), cluster=cluster)
        sim.emit(started, source="members", key=event_key(started))
        nodes = self.nodes.setdefault(cluster, {})
        for rack in range(RACKS):
            for index in range(NODES_PER_RACK):
                node = f"{cluster}-r{rack}-n{index}"
                labels = {HOSTNAME_LABEL: node, RACK_LABEL: f"rack{rack}",
                          ZONE_LABEL: f"zone-{'ab'[rack * 2 // RACKS]}", INSTANCE_TYPE_LABEL: "c6.8xl"}
                nodes[node] = labels
                self.free[(cluster, node)] = NODE_CPU
                sim.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels},
                         "spec": {"podCIDR": f"10.{rack}.{index}.0/24"},
                         "status": {"allocatable": {"cpu": str(NODE_CPU), "memory": "120Gi", "pods": "110"},
                                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}},
                        cluster=cluster)
        for kind in MEMBER_LISTS:
            keys = tuple(sorted(member_key(cluster, f"Node//{n}") for n in nodes)) if kind == "Node" else ()
            listed = ObjectsListed(kind=kind, keys=keys, cluster=cluster)
            sim.emit(listed, source="watch", key=event_key(listed))

    # -- a job ----------------------------------------------------------------------------------------------

    def job(self, namespace: str, name: str) -> Job:
        """A new job: its shape, and its Volcano Job observed (what admission reads its queue from)."""
        rnd = self.sim.random
        gang = rnd.random() < self.pod_groups
        replicas = rnd.randint(*self.group_sizes) if gang else rnd.randint(1, 4)
        managed = namespace in self.queue_of
        job = Job(namespace=namespace, name=name, managed=managed, queue=self.queue_of.get(namespace, "default"),
                  replicas=replicas, cpu=rnd.randint(1, 4), gang=gang)
        if self.admission:
            self.sim.put({
                "apiVersion": VOLCANO_JOB_API, "kind": "Job",
                "metadata": {"name": name, "namespace": namespace, "labels": {"app": name, "team": namespace}},
                "spec": {"schedulerName": "volcano", "queue": job.queue, "minAvailable": replicas,
                         "priorityClassName": "batch-high" if rnd.random() < 0.2 else "batch-normal",
                         "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": {
                             "containers": [{"name": "worker", "image": "registry.example.com/etl:1.4",
                                             "resources": {"requests": {"cpu": str(job.cpu),
                                                                        "memory": f"{4 * job.cpu}Gi"}}}],
                             "restartPolicy": "OnFailure"}}}]},
            })
        self.jobs[job.binding_key] = job
        return job

    def binding(self, job: Job) -> None:
        self.sim.binding(job.namespace, job.name, replicas=job.replicas,
                         request={"cpu": str(job.cpu), "memory": f"{4 * job.cpu}Gi"}, unscheduled=job.managed)

    def settled(self, job: Job) -> None:
        """The job's objects are settled: one that is not queue-managed was scheduled at once and runs now."""
        if not job.managed:
            self.run(job.binding_key)
        self.finish_due()

    def follow(self, record: CommandRecord, outcome: CommandSucceeded) -> None:
        """A resumed binding was just scheduled (``Simulation._apply``): its job runs; a released pod is bound."""
        command = record.command
        if isinstance(command, ResumeBinding):
            self.run(command.binding.key)
        elif isinstance(command, ReleasePod):
            self.schedule_pod(command, outcome)

    def run(self, key: str) -> None:
        job = self.jobs.get(key)
        binding = self.sim.api.get(key)
        if job is None or binding is None:
            return
        clusters = binding["spec"].get("clusters") or []
        job.cluster = clusters[0]["name"] if clusters else ""
        if job.gang and job.cluster in self.watched:
            self.gang(job)
        elif not job.managed:
            del self.jobs[key]  # nothing of it to follow: it runs out of tether's sight, as in the plain scenario
            return
        heapq.heappush(self.running, (self.sim.clock + self.sim.random.randint(*RUN_MS), key))

    def gang(self, job: Job) -> None:
        """The job's PodGroup, then its pods through tether's pod webhook (gated)."""
        sim, cluster, rnd = self.sim, job.cluster, self.sim.random
        affinity: dict[str, Any] = {"required": [{"topologyKey": RACK_LABEL}],
                                    "sortRules": [{"resource": "CPU", "dimension": "Available",
                                                   "order": "Descending"}]} if rnd.random() < 0.6 else \
            {"required": [{"topologyKey": ZONE_LABEL}], "preferred": [{"topologyKey": RACK_LABEL}]}
        sim.put({"apiVersion": POD_GROUP_API_VERSION, "kind": "PodGroup",
                 "metadata": {"name": job.name, "namespace": job.namespace, "creationTimestamp": rfc3339(sim.clock)},
                 "spec": {"minMember": job.replicas, "scheduleTimeoutSeconds": 300,
                          "affinity": {"podGroupAffinity": affinity}}}, cluster=cluster)
        for index in range(job.replicas):
            name = f"{job.name}-worker-{index}"
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": job.namespace, "creationTimestamp": rfc3339(sim.clock),
                                "labels": {VOLCANO_JOB_NAME_LABEL: job.name, VOLCANO_TASK_SPEC_LABEL: "worker"},
                                "annotations": {POD_GROUP_ANNOTATION: job.name},
                                "ownerReferences": [{"apiVersion": VOLCANO_JOB_API, "kind": "Job", "name": job.name,
                                                     "uid": f"job-{job.namespace}-{job.name}", "controller": True}]},
                   "spec": {"containers": [{"name": "worker", "image": "registry.example.com/etl:1.4",
                                            "resources": {"requests": {"cpu": str(job.cpu),
                                                                       "memory": f"{4 * job.cpu}Gi"}}}],
                            "restartPolicy": "OnFailure", "schedulerName": "default-scheduler"},
                   "status": {"phase": "Pending"}}
            uid = f"{rnd.getrandbits(128):032x}"
            request_uid = f"{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:]}"
            state = sim.world.members.clusters.get(cluster) or MemberState()
            verdict = decide_pod_gate(state=state, operation="CREATE", namespace=job.namespace, pod=pod,
                                      request_uid=request_uid)
            decided = PodGateDecided(cluster=cluster, namespace=job.namespace, request_uid=request_uid,
                                     gated=verdict.gated, name=name, patch=verdict.patch, reason=verdict.reason,
                                     decided_at=state.position)
            sim.emit(decided, source="webhook", key=event_key(decided))
            if verdict.patch:
                pod = json_patch(pod, list(verdict.patch))
            sim.put(pod, cluster=cluster)
            job.pods.append(member_key(cluster, f"Pod/{job.namespace}/{name}"))

    def schedule_pod(self, command: ReleasePod, outcome: CommandSucceeded) -> None:
        """kube-scheduler: a released pod is bound to the least allocated node its required terms allow."""
        key = outcome.target
        raw = self.sim.api.get(key)
        job = next((j for j in self.jobs.values() if key in j.pods), None)
        if raw is None or job is None or raw["spec"].get("nodeName"):
            return
        cluster = command.cluster
        nodes = self.nodes.get(cluster, {})
        fits = [(self.free[(cluster, n)], n) for n, labels in sorted(nodes.items())
                if self.free[(cluster, n)] >= job.cpu
                and (not command.required or selector_matches(command.required, name=n, labels=labels))]
        if not fits:
            return  # stays Pending (its group is planned again when room appears)
        node = max(fits, key=lambda f: (f[0], [-ord(c) for c in f[1]]))[1]
        self.free[(cluster, node)] -= job.cpu
        self.bound[key] = (node, job.cpu)
        raw["spec"]["nodeName"] = node
        raw["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
        self.sim.put(raw, cluster=cluster)

    # -- jobs that finish -----------------------------------------------------------------------------------

    def finish_due(self) -> None:
        """Clean up every job whose run has ended: its pods and PodGroup, its Volcano Job, its binding."""
        sim = self.sim
        while self.running and self.running[0][0] <= sim.clock:
            _, key = heapq.heappop(self.running)
            job = self.jobs.pop(key)
            for pod in job.pods:
                cluster, _, pod_key = pod.partition(":")
                held = self.bound.pop(pod, None)
                if held is not None:
                    self.free[(cluster, held[0])] += held[1]
                sim.delete(pod_key, cluster=cluster)
            if job.pods:
                sim.delete(f"PodGroup/{job.namespace}/{job.name}", cluster=job.cluster)
            if self.admission:
                sim.delete(f"Job/{job.namespace}/{job.name}")
            sim.delete(key)
            sim.run()

    def drain(self, *, limit_ms: int = 600_000) -> None:
        """The end of the day: time passes (timers firing, jobs finishing) until every job has run and finished,
        or ``limit_ms`` have passed."""
        sim = self.sim
        end = sim.clock + limit_ms
        while self.jobs and sim.clock < end:
            sim.idle(1_000)
            self.finish_due()


__all__ = ["ADMISSION_CONFIGMAP", "QUEUES", "WATCHED", "Job", "Workloads"]
