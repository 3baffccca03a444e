"""Realistic synthetic logs, for tests, benchmarks and demos: a small in-memory world driven through ``step``.

:class:`Simulation` plays the part of everything around the decider: the Kubernetes API server (objects with
resourceVersions, the watch echoing every write), Karmada (Clusters with status heartbeats, a scheduler that
places each ResourceBinding on a cluster its placement allows), the catalog (answering lookups, announcing
migrations) and tether's executors (applying each command and appending its outcome). Every event goes
through :func:`tether.core.pipeline.step`, exactly as in the daemon, so the commands stream is the one the
decider would have written and ``tether replay --diff`` finds no difference on an untouched log.

What each command does to the objects is
:class:`~tether.adapters.testing.fake_cluster.FakeCluster`'s (the same semantics the decider's scenario tests run
against); this module adds the scenario, the randomness and Karmada's scheduler.

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
from tether.adapters.testing.fake_cluster import FakeCluster
from tether.core.commands import DATA_GROUP_VERSION, SetBindingPlacement
from tether.core.envelope import CommandRecord, EventRecord, rfc3339
from tether.core.events import CommandSucceeded, DataLocationResolved, Event, ObjectDeleted, ObjectObserved, event_key
from tether.core.identity import DataIdentity, make_identity
from tether.core.kube import KubeObject
from tether.core.pipeline import step
from tether.projections.world import World, initial_world

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

    def put(self, raw: dict[str, Any]) -> KubeObject:
        """Create or update an object on the "API server" and queue its observation."""
        obj = self.api.put(raw)
        self.emit(ObjectObserved(obj=obj), source="watch", key=obj.key)
        return obj

    def delete(self, key: str) -> None:
        """Ask for deletion: with finalizers the object is only marked; without, it is gone."""
        if self.api.get(key) is None:
            return
        obj, gone = self.api.delete(key)
        self.emit(ObjectDeleted(obj=obj) if gone else ObjectObserved(obj=obj), source="watch", key=key)

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
            "metadata": {"name": name, "labels": {"topology.karmada.io/region": f"region-{name[-1]}"}},
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

    def binding(self, namespace: str, job: str) -> None:
        self.put({
            "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": f"{job}-job", "namespace": namespace,
                         "labels": {"propagationpolicy.karmada.io/name": f"{namespace}-jobs"}},
            "spec": {"resource": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "namespace": namespace,
                                  "name": job, "uid": f"job-{namespace}-{job}"},
                     "placement": {"clusterAffinity": {"clusterNames": list(self.clusters)},
                                   "replicaScheduling": {"replicaSchedulingType": "Divided"}},
                     "replicas": 1, "clusters": [{"name": self.random.choice(self.clusters), "replicas": 1}]},
            "status": {"conditions": [{"type": "Scheduled", "status": "True", "reason": "Success"}]},
        })

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
                    self.emit(ObjectObserved(obj=event.result), source="watch", key=event.result.key)
                if isinstance(record.command, SetBindingPlacement):
                    command = record.command
                    self._schedule(event.result.key, set(command.excluded_clusters) if command.injected else set())

    def _schedule(self, key: str, excluded: set[str]) -> None:
        """Karmada's scheduler: moves the workload when its cluster is excluded (or was rescheduled)."""
        binding = self.api.get(key)
        if binding is None:
            return
        clusters = binding["spec"].get("clusters") or []
        placed = {c.get("name") for c in clusters if isinstance(c, dict)}
        if placed and not placed & excluded:
            return
        allowed = [c for c in self.clusters if c not in excluded]
        if allowed:
            binding["spec"]["clusters"] = [{"name": self.random.choice(allowed), "replicas": 1}]
            self.put(binding)


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
