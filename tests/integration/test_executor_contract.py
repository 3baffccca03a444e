"""The fake cluster and the real executor agree, command by command.

``adapters/testing/fake_cluster.py`` is what the decider's scenario and property tests, the synthetic logs and the
replay bench run against; ``KubeExecutor`` (``adapters/kubernetes/executor.py``) on an API server is what runs in
production. If they disagree on an outcome — success or failure, no-op or write, the failure's reason, whether it
is retryable — the decider tests follow paths production never takes (a retryable 409 answered as a permanent
failure parks the command for good in the fake, and is retried on a timer in production).

Each scenario here is a sequence of steps: a user's writes (create, delete) and tether's commands. It runs once on a
:class:`FakeCluster` and once on the real executor against the emulator (or a real cluster with
``TETHER_TEST_KUBECONFIG``), and the outcomes are compared **event by event**: the outcome event's type, ``noop``,
``reason`` and ``retryable``, and the object it carries as far as tether's commands write it (finalizers, deletion,
tether's annotations, the spec and status fields the commands own). At the end, every object the scenario touched is
compared as stored. Uids differ between the two (each backend makes its own): a command names an object's uid by
the label of the create that made it.

What is not compared, on purpose: resourceVersions, uids, timestamps, fields an API server defaults
(``spec.reclaimPolicy``, ``conflictResolution``, ``dequeueStrategy``), and the human wording of messages.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BY_KIND, KubeClient
from tether.adapters.kubernetes.executor import KubeExecutor
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.fake_cluster import FakeCluster
from tether.core.commands import (
    AddFinalizer,
    AdmitRequest,
    Command,
    CreateDataSource,
    CreateQueue,
    DeleteDataSource,
    EvictBinding,
    RemoveFinalizer,
    ResumeBinding,
    SetAdmissionHold,
    SetBindingPlacement,
    SuspendDispatching,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    UpdateQueueStatus,
    command_id,
    command_target,
)
from tether.core.envelope import CommandRecord
from tether.core.events import CommandFailed, CommandSucceeded, Event
from tether.core.identity import make_identity
from tether.core.keys import ADMISSION_ANNOTATION, ADMITTED_REQUEST_ANNOTATION, LOCATION_ANNOTATION
from tether.core.kube import Condition, KubeObject, ObjectRef, as_json, object_key

CLAIM_FINALIZER = "datadependency.volcano.sh/finalizer"
DATASOURCE_FINALIZER = "datadependency.volcano.sh/datasource-finalizer"
OWN_ANNOTATIONS = ("datadependency.volcano.sh/", "tether.dev/", LOCATION_ANNOTATION, ADMISSION_ANNOTATION,
                   ADMITTED_REQUEST_ANNOTATION)
CRDS = ("datadependency.volcano.sh_datasourceclaims", "datadependency.volcano.sh_datasources",
        "work.karmada.io_resourcebindings", "scheduling.volcano.sh_queues")


# --- steps ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Create:
    """A user creates ``raw``; its uid is remembered as ``label``."""

    label: str
    raw: dict[str, Any]


@dataclass(frozen=True)
class Delete:
    """A user deletes the object (marked deleting while it has finalizers)."""

    kind: str
    namespace: str
    name: str


@dataclass(frozen=True)
class Run:
    """tether applies a command, built from the uids remembered so far."""

    make: Callable[[dict[str, str]], Command]
    what: str


Step = Create | Delete | Run


class Backend(Protocol):
    uids: dict[str, str]

    async def create(self, label: str, raw: dict[str, Any]) -> None: ...
    async def delete(self, kind: str, namespace: str, name: str) -> None: ...
    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def apply(self, record: CommandRecord) -> Event: ...


class Fake:
    def __init__(self) -> None:
        self.cluster = FakeCluster()
        self.uids: dict[str, str] = {}

    async def create(self, label: str, raw: dict[str, Any]) -> None:
        self.uids[label] = self.cluster.put(raw).metadata.uid

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        self.cluster.delete(object_key(kind, namespace, name))

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cluster.get(object_key(kind, namespace, name))

    async def apply(self, record: CommandRecord) -> Event:
        return next(event for source, event in self.cluster.apply(record) if source == "executor")


class Real:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        # retries without waiting: the outcome after the executor's retries is what is compared, not their pace
        self.executor = KubeExecutor(kube, sleep=_no_wait)
        self.uids: dict[str, str] = {}

    async def create(self, label: str, raw: dict[str, Any]) -> None:
        res = BY_KIND[raw["kind"]]
        created = await self.kube.create(res, raw, namespace=raw["metadata"].get("namespace", ""))
        self.uids[label] = created["metadata"]["uid"]

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        await self.kube.delete(BY_KIND[kind], name, namespace=namespace)

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.kube.get(BY_KIND[kind], name, namespace=namespace)

    async def apply(self, record: CommandRecord) -> Event:
        outcome, = await self.executor.apply(record)
        return outcome


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


# --- what is compared -----------------------------------------------------------------------------------------


def view(obj: dict[str, Any] | KubeObject | None) -> dict[str, Any] | None:
    """What tether's commands write of an object (module doc)."""
    if obj is None:
        return None
    raw: dict[str, Any] = as_json(obj) if isinstance(obj, KubeObject) else obj
    meta = raw.get("metadata") or {}
    spec = dict(raw.get("spec") or {})
    for defaulted in ("reclaimPolicy", "conflictResolution", "dequeueStrategy"):
        spec.pop(defaulted, None)  # defaulted by the CRD on an API server, not by the fake
    spec.pop("replicaRequirements", None)  # (quantities normalised by an API server)
    return {
        "kind": raw.get("kind"), "namespace": meta.get("namespace", ""), "name": meta.get("name"),
        "finalizers": list(meta.get("finalizers") or []), "deleting": bool(meta.get("deletionTimestamp")),
        "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(OWN_ANNOTATIONS)},
        "spec": spec, "status": dict(raw.get("status") or {}),
    }


def outcome(event: Event) -> tuple[Any, ...]:
    match event:
        case CommandSucceeded(noop=noop, result=result):
            return "succeeded", noop, view(result)
        case CommandFailed(reason=reason, retryable=retryable):
            return "failed", reason, retryable
    raise AssertionError(f"not an outcome: {event!r}")


async def run(backend: Backend, steps: list[Step]) -> tuple[list[tuple[str, tuple[Any, ...]]], dict[str, Any]]:
    outcomes: list[tuple[str, tuple[Any, ...]]] = []
    touched: dict[tuple[str, str, str], None] = {}
    for i, s in enumerate(steps):
        match s:
            case Create(label=label, raw=raw):
                meta = raw["metadata"]
                touched[(raw["kind"], meta.get("namespace", ""), meta["name"])] = None
                await backend.create(label, raw)
            case Delete(kind=kind, namespace=ns, name=name):
                await backend.delete(kind, ns, name)
            case Run(make=make, what=what):
                command = make(backend.uids)
                record = CommandRecord(id=command_id(command), at_ms=1, key=command_target(command),
                                       command=command, causation=f"0:{i + 1}")
                outcomes.append((what, outcome(await backend.apply(record))))
    stored = {"/".join(k): view(await backend.get(*k)) for k in touched}
    return outcomes, stored


# --- scenarios ------------------------------------------------------------------------------------------------


def _ref(kind: str, namespace: str, name: str, uid: str = "") -> ObjectRef:
    return ObjectRef(api_version=BY_KIND[kind].api_version, kind=kind, name=name, namespace=namespace, uid=uid)


def _status(ref: ObjectRef, phase: str, bound: str = "") -> UpdateClaimStatus:
    return UpdateClaimStatus(claim=ref, phase=phase, bound_data_source=bound, conditions=(
        Condition(type="Bound", status="True" if bound else "False", reason=phase, message=phase,
                  last_transition_time="2026-01-01T00:00:00Z", observed_generation=1),))


def claim_lifecycle(ns: str, suffix: str) -> list[Step]:
    def c(uids: dict[str, str]) -> ObjectRef:
        return _ref("DataSourceClaim", ns, "c", uids["c"])

    return [
        Create("c", manifests.claim("c", namespace=ns, table=f"db.t{suffix}")),
        Run(lambda u: AddFinalizer(target=c(u), finalizer=CLAIM_FINALIZER), "add the finalizer"),
        Run(lambda u: AddFinalizer(target=c(u), finalizer=CLAIM_FINALIZER), "add it again"),
        Run(lambda u: _status(c(u), "Pending"), "status Pending"),
        Run(lambda u: _status(c(u), "Pending"), "status Pending again"),
        Run(lambda u: _status(c(u), "Bound", "ds-x"), "status Bound"),
        Delete("DataSourceClaim", ns, "c"),
        Run(lambda u: _status(c(u), "Bound", "ds-x"), "status of a deleting claim, unchanged"),
        Run(lambda u: AddFinalizer(target=c(u), finalizer="example.com/other"), "a new finalizer while deleting"),
        Run(lambda u: RemoveFinalizer(target=c(u), finalizer=CLAIM_FINALIZER), "remove the last finalizer"),
        Run(lambda u: RemoveFinalizer(target=c(u), finalizer=CLAIM_FINALIZER), "remove it from a gone claim"),
        Run(lambda u: _status(c(u), "Pending"), "status of a gone claim"),
        Run(lambda u: AddFinalizer(target=c(u), finalizer=CLAIM_FINALIZER), "add a finalizer to a gone claim"),
    ]


def recreated_objects(ns: str, suffix: str) -> list[Step]:
    """Commands about an object that was deleted and created again under the same name: the uid precondition."""

    def old_claim(uids: dict[str, str]) -> ObjectRef:
        return _ref("DataSourceClaim", ns, "r", uids["r#1"])

    def old_binding(uids: dict[str, str]) -> ObjectRef:
        return _ref("ResourceBinding", ns, "app-deployment", uids["rb#1"])

    return [
        Create("r#1", manifests.claim("r", namespace=ns, table=f"db.r{suffix}")),
        Create("rb#1", unscheduled(manifests.resource_binding("app", namespace=ns, suspended=True))),
        Delete("DataSourceClaim", ns, "r"),
        Delete("ResourceBinding", ns, "app-deployment"),
        Create("r#2", manifests.claim("r", namespace=ns, table=f"db.r{suffix}")),
        Create("rb#2", unscheduled(manifests.resource_binding("app", namespace=ns, suspended=True))),
        Run(lambda u: AddFinalizer(target=old_claim(u), finalizer=CLAIM_FINALIZER), "finalizer for the old claim"),
        Run(lambda u: _status(old_claim(u), "Pending"), "status for the old claim"),
        Run(lambda u: RemoveFinalizer(target=old_claim(u), finalizer=CLAIM_FINALIZER), "release the old claim"),
        Run(lambda u: SetBindingPlacement(binding=old_binding(u), excluded_clusters=("west",)),
            "placement for the old binding"),
        Run(lambda u: ResumeBinding(binding=old_binding(u), admitted_request=(("cpu", "100m"),)),
            "resume the old binding"),
        Run(lambda u: SetAdmissionHold(binding=old_binding(u), annotation=ADMISSION_ANNOTATION, text="held"),
            "hold the old binding"),
        # the same commands about the object that exists now do apply
        Run(lambda u: AddFinalizer(target=_ref("DataSourceClaim", ns, "r", u["r#2"]), finalizer=CLAIM_FINALIZER),
            "finalizer for the new claim"),
        Run(lambda u: SetBindingPlacement(binding=_ref("ResourceBinding", ns, "app-deployment", u["rb#2"]),
                                          excluded_clusters=("west",)), "placement for the new binding"),
    ]


def data_sources(ns: str, suffix: str) -> list[Step]:
    name = f"ds-{suffix}"
    identity = make_identity("amoro", "table", f"db.t{suffix}", None)
    other = make_identity("amoro", "table", f"db.t{suffix}", {"branch": "dev"})

    def create(i: Any = identity) -> CreateDataSource:
        return CreateDataSource(name=name, identity=i, cluster_names=("east",), location="s3://east/t")

    refs = (_ref("DataSourceClaim", ns, "a"),)
    return [
        Run(lambda u: create(), "create"),
        Run(lambda u: create(), "create again"),
        Run(lambda u: create(other), "create the name for another identity (attributes differ)"),
        Run(lambda u: create(make_identity("hive", "table", f"db.t{suffix}", None)), "… another system"),
        Run(lambda u: UpdateDataSourceLocality(name=name, cluster_names=("west",), location="s3://west/t"), "move"),
        Run(lambda u: UpdateDataSourceLocality(name=name, cluster_names=("west",), location="s3://west/t"),
            "move again"),
        Run(lambda u: UpdateDataSourceStatus(name=name, claim_refs=refs, bound_claims=1), "status"),
        Run(lambda u: UpdateDataSourceStatus(name=name, claim_refs=refs, bound_claims=1), "status again"),
        Run(lambda u: DeleteDataSource(name=name, uid="not-its-uid"), "delete another uid"),
        Run(lambda u: UpdateDataSourceLocality(name=f"{name}-none", cluster_names=(), location=""),
            "move a missing one"),
        Run(lambda u: UpdateDataSourceStatus(name=f"{name}-none", claim_refs=(), bound_claims=0),
            "status of a missing one"),
        Run(lambda u: DeleteDataSource(name=f"{name}-none", uid="x"), "delete a missing one"),
    ]


def data_source_deleted(ns: str, suffix: str) -> list[Step]:
    name = f"dd-{suffix}"
    ref = _ref("DataSource", "", name)
    return [
        Create("ds", {"apiVersion": ref.api_version, "kind": "DataSource",
                      "metadata": {"name": name, "finalizers": [DATASOURCE_FINALIZER]},
                      "spec": {"system": "amoro", "type": "table", "name": f"db.d{suffix}",
                               "locality": {"clusterNames": ["east"]}}}),
        Run(lambda u: DeleteDataSource(name=name, uid=u["ds"]), "delete (its finalizer holds it)"),
        Run(lambda u: DeleteDataSource(name=name, uid=u["ds"]), "delete again"),
        Run(lambda u: RemoveFinalizer(target=ref, finalizer=DATASOURCE_FINALIZER), "release it"),
        Run(lambda u: DeleteDataSource(name=name, uid=u["ds"]), "delete a gone one"),
    ]


def unscheduled(binding: dict[str, Any]) -> dict[str, Any]:
    """A binding no scheduler picks up: on a real control plane karmada-scheduler would place a resumed binding
    onto whatever Clusters exist (``spec.clusters`` rewritten under the comparison), and the fake has none."""
    binding["spec"]["schedulerName"] = "tether-test-no-scheduler"
    return binding


def bindings(ns: str, suffix: str) -> list[Step]:
    def rb(uids: dict[str, str]) -> ObjectRef:
        return _ref("ResourceBinding", ns, "job-deployment", uids["rb"])

    placed = unscheduled(manifests.resource_binding("job", namespace=ns, suspended=True, exclude=["user-own"]))
    placed["spec"]["clusters"] = [{"name": "west", "replicas": 1}]  # where Karmada put it: excluding it reschedules
    return [
        Create("rb", placed),
        Run(lambda u: SetBindingPlacement(binding=rb(u), excluded_clusters=("west",)), "exclude"),
        Run(lambda u: SetBindingPlacement(binding=rb(u), excluded_clusters=("west",)), "exclude again"),
        Run(lambda u: SetBindingPlacement(binding=rb(u), excluded_clusters=("west", "north")), "exclude more"),
        Run(lambda u: SetBindingPlacement(binding=rb(u), excluded_clusters=("west", "north"),
                                          reschedule_at="2026-01-01T00:00:00Z"), "reschedule"),
        Run(lambda u: SetBindingPlacement(binding=rb(u), excluded_clusters=("west", "north"),
                                          reschedule_at="2026-01-01T00:00:00Z"), "reschedule again"),
        Run(lambda u: SetBindingPlacement(binding=rb(u), excluded_clusters=(), injected=False), "withdraw"),
        Run(lambda u: SetAdmissionHold(binding=rb(u), annotation=ADMISSION_ANNOTATION, text="queue full"), "hold"),
        Run(lambda u: SetAdmissionHold(binding=rb(u), annotation=ADMISSION_ANNOTATION, text="queue full"),
            "hold again"),
        Run(lambda u: ResumeBinding(binding=rb(u), admitted_request=(("cpu", "100m"),)), "resume"),
        Run(lambda u: ResumeBinding(binding=rb(u), admitted_request=(("cpu", "100m"),)), "resume again"),
        Run(lambda u: SuspendDispatching(binding=rb(u), reason="queue q: cpu 2/1"), "suspend its dispatching"),
        Run(lambda u: SuspendDispatching(binding=rb(u), reason="queue q: cpu 2/1"), "suspend it again"),
        Run(lambda u: SuspendDispatching(binding=rb(u), reason="queue q: cpu 3/1"), "another reason"),
        Run(lambda u: AdmitRequest(binding=rb(u), admitted_request=(("cpu", "3"),)), "admit its growth"),
        Run(lambda u: AdmitRequest(binding=rb(u), admitted_request=(("cpu", "3"),)), "admit it again"),
        Run(lambda u: AdmitRequest(binding=rb(u), admitted_request=(("cpu", "1"),)), "admit a shrink"),
        Run(lambda u: EvictBinding(binding=rb(u), for_binding=f"{ns}/other", queue="q", policy="preempt",
                                   reason="evicted"), "evict"),
        Run(lambda u: EvictBinding(binding=rb(u), for_binding=f"{ns}/other", queue="q", policy="preempt",
                                   reason="evicted"), "evict again"),
        Run(lambda u: EvictBinding(binding=rb(u), for_binding=f"{ns}/third", queue="q", policy="reclaim",
                                   reason="evicted again"), "evict a suspended one for another"),
        Run(lambda u: ResumeBinding(binding=rb(u), admitted_request=(("cpu", "100m"),)), "admit the evicted one"),
        Run(lambda u: EvictBinding(binding=_ref("ResourceBinding", ns, "none-deployment"), for_binding=f"{ns}/x",
                                   queue="q", policy="preempt", reason="evicted"), "evict a missing binding"),
        Run(lambda u: SetBindingPlacement(binding=_ref("ResourceBinding", ns, "none-deployment"),
                                          excluded_clusters=("west",)), "placement of a missing binding"),
    ]


def queues(ns: str, suffix: str) -> list[Step]:
    name = f"q-{suffix}"
    queue = _ref("Queue", "", name)
    return [
        Run(lambda u: CreateQueue(name=name, weight=2), "create"),
        Run(lambda u: CreateQueue(name=name, weight=2), "create again"),
        Run(lambda u: UpdateQueueStatus(queue=queue, allocated=(("cpu", "1"),), pending=1, running=0, inqueue=1),
            "status"),
        Run(lambda u: UpdateQueueStatus(queue=queue, allocated=(("cpu", "1"),), pending=1, running=0, inqueue=1),
            "status again"),
        Run(lambda u: UpdateQueueStatus(queue=queue, allocated=(), pending=0, running=1, inqueue=0),
            "status, nothing allocated"),
        Run(lambda u: UpdateQueueStatus(queue=_ref("Queue", "", f"{name}-none"), allocated=(), pending=0,
                                        running=0, inqueue=0), "status of a missing queue"),
    ]


SCENARIOS: dict[str, Callable[[str, str], list[Step]]] = {
    "claim lifecycle": claim_lifecycle, "recreated objects": recreated_objects, "data sources": data_sources,
    "a data source deleted": data_source_deleted, "bindings": bindings, "queues": queues,
}


@pytest.fixture
async def real(kube: KubeEnv) -> Real:
    await kube.register_crds(*CRDS)
    return Real(KubeClient(kube.api_client))


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_the_fake_cluster_answers_every_command_as_the_real_executor(
        scenario: str, real: Real, kube: KubeEnv) -> None:
    suffix = secrets.token_hex(3)  # cluster-scoped names (DataSources, Queues) unique on a shared cluster
    steps = SCENARIOS[scenario](kube.namespace, suffix)
    try:
        fake_outcomes, fake_stored = await run(Fake(), steps)
        real_outcomes, real_stored = await run(real, steps)
        for (what, mine), (_, theirs) in zip(fake_outcomes, real_outcomes, strict=True):
            assert mine == theirs, f"{scenario}: {what}: the fake answered {mine}, the real executor {theirs}"
        assert fake_stored == real_stored
    finally:
        await _clean(real, steps)


async def _clean(real: Real, steps: list[Step]) -> None:
    """Cluster-scoped leftovers (a shared cluster keeps them): release and delete the scenario's own."""
    commands = [s.make(real.uids) for s in steps if isinstance(s, Run)]
    names = {c.name for c in commands if isinstance(c, CreateDataSource | CreateQueue)}
    names |= {s.raw["metadata"]["name"] for s in steps if isinstance(s, Create) and s.raw["kind"] == "DataSource"}
    for kind in ("DataSource", "Queue"):
        for name in names:
            obj = await real.get(kind, "", name)
            if obj is None:
                continue
            if obj["metadata"].get("finalizers"):
                await real.kube.patch(BY_KIND[kind], name, {"metadata": {"finalizers": None}})
            await real.kube.delete(BY_KIND[kind], name)

