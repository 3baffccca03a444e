"""Realistic synthetic logs, for tests, benchmarks and demos: a small in-memory world driven through ``step``.

:class:`Simulation` plays the part of everything around the decider: the Kubernetes API server (objects with
resourceVersions, the watch echoing every write), Karmada (Clusters with status heartbeats, a scheduler that
places each ResourceBinding on a cluster its placement allows), the catalog (answering lookups, announcing
migrations) and tether's executors (applying each command and appending its outcome). Every event goes
through :func:`tether.core.pipeline.step`, exactly as in the daemon, so the commands stream is the one the
decider would have written and ``tether replay --diff`` finds no difference on an untouched log.

Offsets are assigned here, in order, from 1 (so causations are known before writing); :meth:`Simulation.write`
appends everything to an *empty* log, which assigns the same offsets. Deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from collections import deque
from typing import Any

import msgspec

from tether.adapters.log import EventLog
from tether.core.commands import (
    AddFinalizer,
    Command,
    CreateDataSource,
    DeleteDataSource,
    EmitKubernetesEvent,
    LookupDataLocation,
    RemoveFinalizer,
    SetBindingPlacement,
    StartTimer,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    command_name,
    command_target,
)
from tether.core.envelope import CommandRecord, EventRecord, rfc3339
from tether.core.events import (
    CommandSucceeded,
    DataLocationResolved,
    Event,
    ObjectDeleted,
    ObjectObserved,
)
from tether.core.identity import DataIdentity, make_identity
from tether.core.kube import KubeObject, ObjectMeta
from tether.core.pipeline import step
from tether.core.placement import plan_placement
from tether.projections.world import World, initial_world

CLAIM_API = "datadependency.volcano.sh/v1alpha1"
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
        self.objects: dict[str, KubeObject] = {}
        self.events: list[EventRecord] = []
        self.commands: list[CommandRecord] = []
        self.clock = start_ms
        self.rv = 1000
        self.uids = 0
        self.echo = echo
        self.clusters = [f"member{i}" for i in range(1, clusters + 1)]
        self.mapping = _mapping(clusters)
        self.catalog: dict[str, str] = {}  # identity key → location
        self._queue: deque[EventRecord] = deque()

    # -- the log -----------------------------------------------------------------------------------------

    def _tick(self) -> int:
        self.clock += self.random.randint(1, 40)
        return self.clock

    def emit(self, event: Event, *, source: str, key: str, causation: str = "") -> None:
        """Queue an event (appended and decided in order by :meth:`run`)."""
        self._queue.append(EventRecord(at_ms=0, source=source, key=key, event=event, causation=causation))

    def run(self) -> None:
        """Append queued events one by one, deciding each and applying its commands (which queue outcomes)."""
        while self._queue:
            pending = self._queue.popleft()
            record = msgspec.structs.replace(pending, at_ms=self._tick(), offset=len(self.events) + 1)
            self.events.append(record)
            for command in step(self.world, record):
                command.offset = len(self.commands) + 1
                self.commands.append(command)
                self._apply(command)

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

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def put(self, obj: KubeObject, *, source: str = "watch") -> KubeObject:
        """Create or update ``obj`` on the "API server" (new resourceVersion) and queue its observation."""
        obj.metadata.resource_version = self._next_rv()
        if not obj.metadata.uid:
            self.uids += 1
            obj.metadata.uid = f"00000000-0000-4000-8000-{self.uids:012d}"
            obj.metadata.creation_timestamp = rfc3339(self.clock)
        self.objects[obj.key] = obj
        self.emit(ObjectObserved(obj=_copy(obj)), source=source, key=obj.key)
        return obj

    def delete(self, key: str) -> None:
        """Ask for deletion: with finalizers the object is only marked; without, it is gone."""
        obj = self.objects.get(key)
        if obj is None:
            return
        if obj.metadata.finalizers:
            obj.metadata.deletion_timestamp = rfc3339(self.clock)
            self.put(obj)
        else:
            del self.objects[key]
            self.emit(ObjectDeleted(obj=_copy(obj)), source="watch", key=key)

    # -- the objects -------------------------------------------------------------------------------------

    def plugin_configmap(self) -> None:
        doc = {"system": "amoro", "endpoint": {"url": "http://amoro.data:1630", "auth": {"type": "none"}},
               "locationMapping": self.mapping, "retryConfig": {"maxRetries": 3, "initialBackoff": "1s"}}
        self.put(KubeObject(api_version="v1", kind="ConfigMap",
                            metadata=ObjectMeta(name="volcano-global-datasource-plugins", namespace="volcano-global"),
                            data={"amoro": json.dumps(doc)}))

    def cluster(self, name: str, *, ready: bool = True) -> None:
        obj = self.objects.get(f"Cluster//{name}") or KubeObject(
            api_version="cluster.karmada.io/v1alpha1", kind="Cluster",
            metadata=ObjectMeta(name=name, labels={"topology.karmada.io/region": f"region-{name[-1]}"}),
            spec={"syncMode": "Push", "apiEndpoint": f"https://{name}.example:6443",
                  "secretRef": {"namespace": "karmada-cluster", "name": name}},
        )
        obj.status = {
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
        self.put(KubeObject(api_version=CLAIM_API, kind="DataSourceClaim",
                            metadata=ObjectMeta(name=name, namespace=namespace, generation=1,
                                                labels={"app": job, "team": namespace}),
                            spec=spec))

    def binding(self, namespace: str, job: str) -> None:
        self.put(KubeObject(
            api_version="work.karmada.io/v1alpha2", kind="ResourceBinding",
            metadata=ObjectMeta(name=f"{job}-job", namespace=namespace, generation=1,
                                labels={"propagationpolicy.karmada.io/name": f"{namespace}-jobs"}),
            spec={"resource": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "namespace": namespace,
                               "name": job, "uid": f"job-{namespace}-{job}"},
                  "placement": {"clusterAffinity": {"clusterNames": list(self.clusters)},
                                "replicaScheduling": {"replicaSchedulingType": "Divided"}},
                  "replicas": 1, "clusters": [{"name": self.random.choice(self.clusters), "replicas": 1}]},
            status={"conditions": [{"type": "Scheduled", "status": "True", "reason": "Success"}]},
        ))

    def migrate(self, identity: DataIdentity) -> None:
        """The catalog announces that the table moved to another datacenter (a push)."""
        old = self.catalog[identity.key]
        dc = next(d for d in DATACENTERS if f"warehouse-{d}/" in old)
        new_dc = DATACENTERS[(DATACENTERS.index(dc) + 1) % len(DATACENTERS)]
        self.catalog[identity.key] = old.replace(f"warehouse-{dc}/", f"warehouse-{new_dc}/")
        self.emit(DataLocationResolved(identity=identity, location=self.catalog[identity.key], trigger="push"),
                  source="catalog", key=f"Data/{identity.key}")

    # -- the executors -----------------------------------------------------------------------------------

    def _succeed(self, record: CommandRecord, result: KubeObject | None, *, noop: bool = False) -> None:
        command = record.command
        self.emit(CommandSucceeded(command_id=record.id, command=command_name(command),
                                   target=command_target(command), result=_copy(result) if result else None,
                                   noop=noop),
                  source="executor", key=command_target(command), causation=record.id)

    def _write(self, record: CommandRecord, obj: KubeObject) -> None:
        """A write accepted by the API server: the outcome carries the object, and the watch echoes it."""
        obj.metadata.resource_version = self._next_rv()
        self.objects[obj.key] = obj
        self._succeed(record, obj)
        if self.echo:
            self.emit(ObjectObserved(obj=_copy(obj)), source="watch", key=obj.key)

    def _apply(self, record: CommandRecord) -> None:
        command: Command = record.command
        target = self.objects.get(command_target(command))
        match command:
            case AddFinalizer(finalizer=f) if target is not None:
                target.metadata.finalizers = [*target.metadata.finalizers, f]
                self._write(record, target)
            case RemoveFinalizer(finalizer=f) if target is not None:
                target.metadata.finalizers = [x for x in target.metadata.finalizers if x != f]
                if target.deleting and not target.metadata.finalizers:
                    del self.objects[target.key]
                    self._succeed(record, None)
                    self.emit(ObjectDeleted(obj=_copy(target)), source="watch", key=target.key)
                else:
                    self._write(record, target)
            case UpdateClaimStatus(phase=phase, bound_data_source=ds, conditions=conditions) if target is not None:
                target.status = {"phase": phase, "conditions": msgspec.to_builtins(conditions)} | (
                    {"boundDataSource": ds} if ds else {})
                self._write(record, target)
            case UpdateDataSourceStatus(claim_refs=refs, bound_claims=n, conditions=conds) if target is not None:
                target.status = {"claimRefs": msgspec.to_builtins(refs), "boundClaims": n} | (
                    {"conditions": msgspec.to_builtins(conds)} if conds else {})
                self._write(record, target)
            case CreateDataSource(name=name, identity=i, cluster_names=clusters, location=loc, reclaim_policy=rp):
                spec: dict[str, Any] = {"system": i.system, "type": i.type, "name": i.name,
                                        "locality": {"clusterNames": list(clusters)}, "reclaimPolicy": rp}
                if i.attributes:
                    spec["attributes"] = dict(i.attributes)
                self.uids += 1
                obj = KubeObject(api_version=CLAIM_API, kind="DataSource",
                                 metadata=ObjectMeta(name=name, uid=f"00000000-0000-4000-9000-{self.uids:012d}",
                                                     creation_timestamp=rfc3339(self.clock),
                                                     annotations={"tether.dev/data-location": loc}),
                                 spec=spec)
                self._write(record, obj)
            case UpdateDataSourceLocality(cluster_names=clusters, location=loc) if target is not None:
                target.spec = target.spec | {"locality": {"clusterNames": list(clusters)}}
                target.metadata.annotations = target.metadata.annotations | {"tether.dev/data-location": loc}
                self._write(record, target)
            case DeleteDataSource() if target is not None:
                self.delete(target.key)
                self._succeed(record, None)
            case SetBindingPlacement(excluded_clusters=excluded, injected=injected, reschedule_at=at) \
                    if target is not None:
                plan = plan_placement(placement=target.spec.get("placement"), annotations=target.metadata.annotations,
                                      desired=frozenset(excluded) if injected else None)
                annotations = dict(target.metadata.annotations)
                for k, v in plan.annotations.items():
                    if v is None:
                        annotations.pop(k, None)
                    else:
                        annotations[k] = v
                target.metadata.annotations = annotations
                target.spec = target.spec | {"placement": plan.placement} | (
                    {"rescheduleTriggeredAt": at} if at else {})
                self._write(record, target)
                self._schedule(target, set(excluded) if injected else set())
            case LookupDataLocation(identity=i):
                location = self.catalog.get(i.key)
                if location is not None:
                    self.emit(DataLocationResolved(identity=i, location=location, trigger="lookup"),
                              source="catalog", key=f"Data/{i.key}", causation=record.id)
            case EmitKubernetesEvent():
                self._succeed(record, None)
            case StartTimer():
                pass  # every lookup is answered here: no retry timer fires
            case _:
                self._succeed(record, None, noop=True)  # its target is gone

    def _schedule(self, binding: KubeObject, excluded: set[str]) -> None:
        """Karmada's scheduler: moves the workload when its cluster is excluded (or was rescheduled)."""
        clusters = binding.spec.get("clusters") or []
        placed = {c.get("name") for c in clusters if isinstance(c, dict)}
        if placed and not placed & excluded:
            return
        allowed = [c for c in self.clusters if c not in excluded]
        if allowed:
            binding.spec = binding.spec | {"clusters": [{"name": self.random.choice(allowed), "replicas": 1}]}
            self.put(binding, source="watch")


def _copy(obj: KubeObject) -> KubeObject:
    """A snapshot of ``obj`` as observed now (the simulation keeps mutating its own copy)."""
    return msgspec.json.decode(msgspec.json.encode(obj), type=KubeObject)


def scenario(sim: Simulation, *, namespaces: int, jobs_per_namespace: int, tables: int, migrations: int = 0,
             deletions: float = 0.0, heartbeats: int = 0) -> Simulation:
    """A platform's day: plugins and clusters, then jobs (1 to 3 claims each, and their ResourceBinding) arriving
    namespace by namespace, table migrations, heartbeats and some deleted claims along the way."""
    rnd = sim.random
    sim.plugin_configmap()
    for name in sim.clusters:
        sim.cluster(name)
    sim.run()
    identities = [sim.table(i) for i in range(tables)]
    total_jobs = namespaces * jobs_per_namespace
    migrate_every = max(1, total_jobs // migrations) if migrations else 0
    beat_every = max(1, total_jobs // heartbeats) if heartbeats else 0
    claims: list[str] = []
    n = 0
    for ns_index in range(namespaces):
        namespace = f"team-{ns_index:03d}"
        for j in range(jobs_per_namespace):
            n += 1
            job = f"etl-{j:04d}"
            binding_first = rnd.random() < 0.3
            if binding_first:
                sim.binding(namespace, job)
            for c in range(rnd.choice((1, 1, 2, 3))):
                identity = identities[rnd.randrange(tables)]
                sim.claim(namespace, f"{job}-input-{c}", identity, job)
                claims.append(f"DataSourceClaim/{namespace}/{job}-input-{c}")
            if not binding_first:
                sim.binding(namespace, job)
            sim.run()
            if migrate_every and n % migrate_every == 0:
                sim.migrate(identities[rnd.randrange(tables)])
                sim.run()
            if beat_every and n % beat_every == 0:
                sim.cluster(rnd.choice(sim.clusters))
                sim.run()
            if deletions and claims and rnd.random() < deletions:
                sim.delete(claims.pop(rnd.randrange(len(claims))))
                sim.run()
    return sim
