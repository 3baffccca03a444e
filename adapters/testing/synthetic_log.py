"""Realistic synthetic logs, for tests, benchmarks and demos: a small in-memory world driven through ``step``.

:class:`Simulation` plays the part of everything around the decider: the Kubernetes API server (objects with
resourceVersions, the watch echoing every write), Karmada (Clusters with status heartbeats, a scheduler that
places each ResourceBinding on a cluster its placement allows), the catalog (answering lookups, announcing
migrations) and tether's executors (applying each command and appending its outcome). Every event goes
through :func:`tether.projections.step.step`, exactly as in the daemon, so the commands stream is the one the
decider would have written and ``tether replay --diff`` finds no difference on an untouched log.

What each command does to the objects is
:class:`~tether.adapters.testing.fake_cluster.FakeCluster`'s (the same semantics the decider's scenario tests run
against); this module adds the scenario, the randomness and Karmada's scheduler (which leaves a suspended binding
alone, and schedules a resumed one).

Queue admission and pod placement are opt-in (``scenario(queue_managed=..., pod_groups=...)``, the actors in
:mod:`.synthetic_jobs`). They need three things of the simulation, all off by default so that the plain scenario's
log stays byte for byte what it was: **timers** fire (``fire_timers``: a ``TimerFired`` is appended, as the daemon's
timer service does, before the first event whose time is past an armed timer's; :meth:`Simulation.idle` lets time
pass with nothing else happening); **ResourceBinding writes go through tether's webhook** (``binding_webhook``: the
user's and Karmada's writes — CREATE and UPDATE — are decided from the world as folded so far and recorded as
``BindingAdmissionDecided`` before the patched object is stored; tether's own writes are applied by the fake
executors without it, a simplification (its answer to them would be an empty patch: the same code decides both,
and on these scenarios it is); and **members**: objects put with ``cluster=`` are a member cluster's, observed with
the member's name, and the outcomes of member commands are echoed by that member's watch. ``followers`` are told
of every command applied, which is how the actors follow tether's writes (kube-scheduler binds a released pod, a
resumed job starts running).

Offsets are assigned here, in order, from 1 (so causations are known before writing); :meth:`Simulation.write`
appends everything to an *empty* log, which assigns the same offsets. Deterministic for a given seed.
"""

from __future__ import annotations

import copy
import json
import random
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from tether.adapters.log import EventLog
from tether.adapters.sandbox.kube_emulator.patch import json_patch
from tether.adapters.testing.fake_cluster import FakeCluster
from tether.adapters.testing.synthetic_jobs import Job, Workloads
from tether.core.admission.webhook_decision import decide_binding_admission
from tether.core.commands import DATA_GROUP_VERSION, ResumeBinding, SetBindingPlacement
from tether.core.envelope import CommandRecord, EventRecord, rfc3339
from tether.core.events import (
    BindingAdmissionDecided,
    CommandSucceeded,
    DataLocationResolved,
    Event,
    ObjectDeleted,
    ObjectObserved,
    TimerFired,
    event_key,
    member_key,
    split_member_key,
)
from tether.core.identity import DataIdentity, make_identity
from tether.core.keys import KARMADA_REGION_LABEL, POLICY_NAME_LABEL
from tether.core.kube import KubeObject, object_key, trim
from tether.core.world import World, initial_world
from tether.projections.step import step

#: Called with each command applied and its (successful, not no-op) outcome: how the actors of
#: ``synthetic_jobs`` (kube-scheduler in the members, the jobs' lifecycle) follow tether's writes.
Follower = Callable[[CommandRecord, CommandSucceeded], None]

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DATACENTERS = ("dc1", "dc2", "dc3")


def _mapping(clusters: int) -> dict[str, list[str]]:
    """Each datacenter's warehouse is cached by two member clusters; the remaining clusters hold no data."""
    return {f"s3://warehouse-{dc}/": [f"member{2 * i + 1}", f"member{2 * i + 2}"]
            for i, dc in enumerate(DATACENTERS) if 2 * i + 2 <= clusters}


class Simulation:
    """Drives a world through ``step`` with realistic objects; collects the events and commands it produced."""

    def __init__(self, *, seed: int = 7, clusters: int = 8, start_ms: int = START_MS, echo: bool = True) -> None:
        self.random = random.Random(seed)
        self.world: World = initial_world()
        self.api = FakeCluster()  # the API server and the catalog, applying commands like the executors
        self.events: list[EventRecord] = []
        self.commands: list[CommandRecord] = []
        self.clock = start_ms
        self.echo = echo
        self.clusters = [f"member{i}" for i in range(1, clusters + 1)]
        self.mapping = _mapping(clusters)
        self.catalog = self.api.catalog  # identity key → location
        self._queue: deque[EventRecord] = deque()
        # Off unless a scenario turns them on (synthetic_jobs), so that the logs of the plain scenario stay as they
        # were: armed timers fire when the clock passes them; ResourceBinding writes go through tether's webhook.
        self.fire_timers = False
        self.binding_webhook = False
        self.followers: list[Follower] = []

    # -- the log -----------------------------------------------------------------------------------------

    def _tick(self) -> int:
        self.clock += self.random.randint(1, 40)
        return self.clock

    def emit(self, event: Event, *, source: str, key: str, causation: str = "") -> None:
        """Queue an event (appended and decided in order by :meth:`run`)."""
        self._queue.append(EventRecord(at_ms=0, source=source, key=key, event=event, causation=causation))

    def run(self) -> None:
        """Append queued events one by one, deciding each and applying its commands (which queue outcomes). With
        ``fire_timers``, the timers the clock has passed fire first (``TimerFired``, as the daemon's timer service
        appends it)."""
        while self._queue:
            pending = self._queue.popleft()
            at = self._tick()
            if self.fire_timers and self.api.timers:
                self._fire_due(at)
            self._append(pending, at)

    def _append(self, pending: EventRecord, at: int) -> None:
        record = msgspec.structs.replace(pending, at_ms=at, offset=len(self.events) + 1)
        self.events.append(record)
        for command in step(self.world, record):
            command.offset = len(self.commands) + 1
            self.commands.append(command)
            self._apply(command)

    def _fire_due(self, now: int) -> None:
        """Fire every armed timer due by ``now``, earliest first."""
        timers = self.api.timers
        while timers:
            timer = min(timers.values(), key=lambda t: (t.fire_at_ms, t.timer_id))
            if timer.fire_at_ms > now:
                return
            del timers[timer.timer_id]
            fired = TimerFired(timer_id=timer.timer_id, purpose=timer.purpose, subject=timer.subject)
            self._append(EventRecord(at_ms=0, source="timer", key=event_key(fired), event=fired), now)

    def idle(self, ms: int) -> None:
        """``ms`` pass with nothing happening but the timers due meanwhile (each fired at its time, and settled)."""
        end = self.clock + ms
        self.run()
        while self.fire_timers and self.api.timers:
            due = min(t.fire_at_ms for t in self.api.timers.values())
            if due > end:
                break
            self.clock = max(self.clock, due)
            self._fire_due(self.clock)
            self.run()
        self.clock = max(self.clock, end)

    async def write(self, log: EventLog, *, batch: int = 5000) -> None:
        """Append the events and commands to ``log``, which must be empty (offsets must come out the same)."""
        for stream, records in (("events", self.events), ("commands", self.commands)):
            for i in range(0, len(records), batch):
                chunk = [msgspec.structs.replace(r, offset=0) for r in records[i : i + batch]]
                stored = await log.append(stream, chunk)  # type: ignore[arg-type]
                if stored and stored[0].offset != records[i].offset:
                    raise RuntimeError(f"the log was not empty: {stream} offset {stored[0].offset} "
                                       f"where {records[i].offset} was expected")

    # -- the API server ----------------------------------------------------------------------------------

    def put(self, raw: dict[str, Any], *, cluster: str = "") -> KubeObject:
        """Create or update an object on the "API server" (of the member ``cluster``, when given) and queue its
        observation. With ``binding_webhook``, a ResourceBinding goes through tether's webhook first."""
        if self.binding_webhook and not cluster and raw.get("kind") == "ResourceBinding":
            raw = self._admit_binding(raw)
        obj = self.api.put(raw, cluster=cluster)
        self.emit(ObjectObserved(obj=obj, cluster=cluster), source="watch", key=member_key(cluster, obj.key))
        return obj

    def delete(self, key: str, *, cluster: str = "") -> None:
        """Ask for deletion: with finalizers the object is only marked; without, it is gone."""
        stored = member_key(cluster, key)
        if self.api.get(stored) is None:
            return
        obj, gone = self.api.delete(stored)
        self.emit(ObjectDeleted(obj=obj, cluster=cluster) if gone else ObjectObserved(obj=obj, cluster=cluster),
                  source="watch", key=stored)

    def _admit_binding(self, raw: dict[str, Any]) -> dict[str, Any]:
        """tether's ResourceBinding webhook (``adapters/kubernetes/binding_webhook.py``): the decision from the world
        as folded so far, recorded (``BindingAdmissionDecided``) before the API server stores the patched object."""
        meta = raw["metadata"]
        key = object_key("ResourceBinding", meta.get("namespace", ""), meta["name"])
        operation = "UPDATE" if self.api.get(key) is not None else "CREATE"
        request = copy.deepcopy(raw)
        verdict = decide_binding_admission(world=self.world, operation=operation, obj=request)
        self.emit(BindingAdmissionDecided(key=key, operation=operation, obj=trim(request), patch=verdict.patch,
                                          reason=verdict.reason, decided_at=self.world.admission.position,
                                          suspended=verdict.suspended), source="webhook", key=key)
        return json_patch(request, list(verdict.patch)) if verdict.patch else raw

    # -- the objects -------------------------------------------------------------------------------------

    def plugin_configmap(self) -> None:
        doc = {"system": "amoro", "endpoint": {"url": "http://amoro.data:1630", "auth": {"type": "none"}},
               "locationMapping": self.mapping, "retryConfig": {"maxRetries": 3, "initialBackoff": "1s"}}
        self.put({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "volcano-global-datasource-plugins", "namespace": "volcano-global"},
                  "data": {"amoro": json.dumps(doc)}})

    def cluster(self, name: str, *, ready: bool = True) -> None:
        obj = self.api.get(f"Cluster//{name}") or {
            "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "labels": {KARMADA_REGION_LABEL: f"region-{name[-1]}"}},
            "spec": {"syncMode": "Push", "apiEndpoint": f"https://{name}.example:6443",
                     "secretRef": {"namespace": "karmada-cluster", "name": name}},
        }
        obj["status"] = {
            "kubernetesVersion": "v1.30.4",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "ClusterReady" if ready else "ClusterNotReachable",
                            "message": "cluster is healthy and ready to accept workloads",
                            "lastTransitionTime": rfc3339(self.clock)}],
            "resourceSummary": {"allocatable": {"cpu": "256", "memory": "1Ti", "pods": "2200"},
                                "allocated": {"cpu": str(self.random.randint(10, 200)), "memory": "400Gi",
                                              "pods": str(self.random.randint(100, 2000))}},
        }
        self.put(obj)

    def table(self, index: int) -> DataIdentity:
        """The identity of table ``index``; its location is known to the catalog from then on."""
        style = index % 3
        name = (f"warehouse.sales_{index}" if style == 0 else f"Lake.Events-{index}" if style == 1
                else f"analytics.clicks-{index}")
        attributes = {"format": "iceberg"} if index % 5 == 0 else None
        identity = make_identity("amoro", "table", name, attributes)
        self.catalog.setdefault(identity.key, f"s3://warehouse-{DATACENTERS[index % len(DATACENTERS)]}/db/t{index}")
        return identity

    def claim(self, namespace: str, name: str, identity: DataIdentity, job: str) -> None:
        spec: dict[str, Any] = {"system": identity.system, "dataSourceType": identity.type,
                                "dataSourceName": identity.name,
                                "workload": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job}}
        if identity.attributes:
            spec["attributes"] = dict(identity.attributes)
        self.put({"apiVersion": DATA_GROUP_VERSION, "kind": "DataSourceClaim",
                  "metadata": {"name": name, "namespace": namespace, "labels": {"app": job, "team": namespace}},
                  "spec": spec})

    def binding(self, namespace: str, job: str, *, replicas: int = 0, request: dict[str, str] | None = None,
                unscheduled: bool = False) -> None:
        """The job's ResourceBinding, as Karmada's detector creates it. ``replicas`` and ``request``: the workload's
        (``spec.replicaRequirements``; what queue admission charges), and then its creation time is the clock's;
        ``unscheduled``: not placed yet (a queue-managed binding, which the webhook suspends)."""
        raw: dict[str, Any] = {
            "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": f"{job}-job", "namespace": namespace,
                         "labels": {POLICY_NAME_LABEL: f"{namespace}-jobs"}},
            "spec": {"resource": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "namespace": namespace,
                                  "name": job, "uid": f"job-{namespace}-{job}"},
                     "placement": {"clusterAffinity": {"clusterNames": list(self.clusters)},
                                   "replicaScheduling": {"replicaSchedulingType": "Divided"}},
                     "replicas": 1, "clusters": [{"name": self.random.choice(self.clusters), "replicas": 1}]},
            "status": {"conditions": [{"type": "Scheduled", "status": "True", "reason": "Success"}]},
        }
        if replicas:
            raw["metadata"]["creationTimestamp"] = rfc3339(self.clock)
            raw["spec"]["replicas"] = replicas
            raw["spec"]["replicaRequirements"] = {"resourceRequest": dict(request or {})}
            raw["spec"]["clusters"][0]["replicas"] = replicas
        if unscheduled:
            del raw["spec"]["clusters"]
            raw["status"] = {}
        self.put(raw)

    def migrate(self, identity: DataIdentity) -> None:
        """The catalog announces that the table moved to another datacenter (a push)."""
        old = self.catalog[identity.key]
        dc = next(d for d in DATACENTERS if f"warehouse-{d}/" in old)
        new_dc = DATACENTERS[(DATACENTERS.index(dc) + 1) % len(DATACENTERS)]
        self.catalog[identity.key] = old.replace(f"warehouse-{dc}/", f"warehouse-{new_dc}/")
        self.emit(DataLocationResolved(identity=identity, location=self.catalog[identity.key], trigger="push"),
                  source="catalog", key=f"Data/{identity.key}")

    # -- the executors and Karmada's scheduler --------------------------------------------------------------

    def _apply(self, record: CommandRecord) -> None:
        """Apply a command as the executors would (FakeCluster), queue its outcome and the watch's echo."""
        for source, event in self.api.apply(record):
            self.emit(event, source=source, key=event_key(event), causation=record.id if source != "watch" else "")
            if isinstance(event, CommandSucceeded) and event.result is not None and not event.noop:
                if self.echo:
                    cluster, _ = split_member_key(event.target)
                    self.emit(ObjectObserved(obj=event.result, cluster=cluster), source="watch",
                              key=member_key(cluster, event.result.key))
                if isinstance(record.command, SetBindingPlacement):
                    command = record.command
                    self._schedule(event.result.key, set(command.excluded_clusters) if command.injected else set())
                elif isinstance(record.command, ResumeBinding):  # no longer suspended: Karmada schedules it now
                    self._schedule(event.result.key, self._excluded(event.result.key))
                for follower in self.followers:
                    follower(record, event)

    def _schedule(self, key: str, excluded: set[str]) -> None:
        """Karmada's scheduler: moves the workload when its cluster is excluded (or was rescheduled)."""
        binding = self.api.get(key)
        if binding is None or (binding["spec"].get("suspension") or {}).get("scheduling") is True:
            return  # (a suspended binding is not scheduled at all)
        clusters = binding["spec"].get("clusters") or []
        placed = {c.get("name") for c in clusters if isinstance(c, dict)}
        if placed and not placed & excluded:
            return
        allowed = [c for c in self.clusters if c not in excluded]
        if allowed:
            binding["spec"]["clusters"] = [{"name": self.random.choice(allowed),
                                            "replicas": binding["spec"].get("replicas", 1)}]
            self.put(binding)

    def _excluded(self, key: str) -> set[str]:
        """The clusters a binding's placement excludes (``clusterAffinity.exclude``)."""
        binding = self.api.get(key)
        exclude = (((binding or {}).get("spec") or {}).get("placement") or {}).get("clusterAffinity", {}).get(
            "exclude") or []
        return {c for c in exclude if isinstance(c, str)}


def _binding(sim: Simulation, workloads: Workloads | None, shape: Job | None, namespace: str, job: str) -> None:
    if workloads is None or shape is None:
        sim.binding(namespace, job)
    else:
        workloads.binding(shape)


def scenario(sim: Simulation, *, namespaces: int, jobs_per_namespace: int, tables: int, migrations: int = 0,
             deletions: float = 0.0, heartbeats: int = 0, queue_managed: float = 0.0,
             pod_groups: float = 0.0, group_sizes: tuple[int, int] = (4, 16)) -> Simulation:
    """A platform's day: plugins and clusters, then jobs (1 to 3 claims each, and their ResourceBinding) arriving
    namespace by namespace, table migrations, heartbeats and some deleted claims along the way.

    Opt-in (:mod:`.synthetic_jobs`; off by default, and then the log is what it always was): ``queue_managed``, the
    share of namespaces whose Volcano Jobs go through queue admission (with it: the admission ConfigMap, Queues,
    every job's Volcano Job, tether's binding webhook); ``pod_groups``, the share of jobs that run as a Godel gang of
    ``group_sizes`` pods — placed by tether when they land on a member it watches. Either makes timers fire, and
    the jobs that admission or placement follows finish after a while (then everything still running finishes at
    the end of the day)."""
    rnd = sim.random
    names = [f"team-{i:03d}" for i in range(namespaces)]
    workloads = Workloads(sim, namespaces=names, queue_managed=queue_managed, pod_groups=pod_groups,
                          group_sizes=group_sizes) if queue_managed > 0 or pod_groups > 0 else None
    if workloads is not None:
        workloads.start()
    sim.plugin_configmap()
    for name in sim.clusters:
        sim.cluster(name)
    sim.run()
    if workloads is not None:
        workloads.objects()
    identities = [sim.table(i) for i in range(tables)]
    total_jobs = namespaces * jobs_per_namespace
    migrate_every = max(1, total_jobs // migrations) if migrations else 0
    beat_every = max(1, total_jobs // heartbeats) if heartbeats else 0
    claims: list[str] = []
    n = 0
    for ns_index in range(namespaces):
        namespace = names[ns_index]
        for j in range(jobs_per_namespace):
            n += 1
            job = f"etl-{j:04d}"
            shape = workloads.job(namespace, job) if workloads is not None else None
            binding_first = rnd.random() < 0.3
            if binding_first:
                _binding(sim, workloads, shape, namespace, job)
            for c in range(rnd.choice((1, 1, 2, 3))):
                identity = identities[rnd.randrange(tables)]
                sim.claim(namespace, f"{job}-input-{c}", identity, job)
                claims.append(f"DataSourceClaim/{namespace}/{job}-input-{c}")
            if not binding_first:
                _binding(sim, workloads, shape, namespace, job)
            sim.run()
            if workloads is not None and shape is not None:
                workloads.settled(shape)
            if migrate_every and n % migrate_every == 0:
                sim.migrate(identities[rnd.randrange(tables)])
                sim.run()
            if beat_every and n % beat_every == 0:
                sim.cluster(rnd.choice(sim.clusters))
                sim.run()
            if deletions and claims and rnd.random() < deletions:
                sim.delete(claims.pop(rnd.randrange(len(claims))))
                sim.run()
    if workloads is not None:
        workloads.drain()
    return sim
