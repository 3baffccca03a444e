"""Admission end to end: tether's ResourceBinding webhook registered on the API server's admission chain, Karmada
scheduling, the daemon deciding. On the emulator Karmada is its scheduler stand-in; on a real cluster
(``TETHER_TEST_KUBECONFIG``) it is the karmada-scheduler watching that cluster (``karmada_kube``), and the webhook,
served on this machine's loopback, must be reachable from the API server (``require_loopback_webhooks``).

* a workload whose claim is Bound: its binding's ``spec.clusters`` never names a cluster without the data — not at
  creation, not after a detector-style rewrite of ``placement`` (both are patched in the write itself);
* a claim still resolving: its binding is created suspended and scheduled only once the placement is in;
* a burst of 200 queue-managed bindings across 4 queues: never past a queue's capability at any moment, each queue
  full, no binding held while a strictly younger one of its queue runs (bindings created in the same second are
  not ordered: one-second creation timestamps, random UIDs), and scheduled by Karmada once resumed;
* the catalog down (503, then its circuit open): a new binding is held; the catalog back: placed onto the data's
  cluster, never scheduled elsewhere in between; down past ``--max-hold``: released without the data constraint, with
  an Event and an annotation saying so, and moved to its data once the catalog is back. ``--diff`` of each log
  finds nothing to re-decide differently.

The test owns its namespace, its Queues (unique names), its webhook configuration (namespaceSelector on its own
namespace) and the stack's Clusters; it removes them at the end. Its bindings carry what karmada-scheduler needs to
consider them (a ``propagationpolicy.karmada.io/permanent-id`` label, a Deployment, which the stack's Clusters list
in ``status.apiEnablements``, Divided with the Weighted preference) and name only the stack's own Clusters in
``clusterAffinity.clusterNames``: a real scheduler also sees the shared cluster's other Clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.cli.replay.diff import diff
from tether.adapters.cli.replay.trail import explain
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import (
    BINDINGS,
    CONFIGMAPS,
    DEPLOYMENTS,
    JSON_PATCH,
    QUEUES,
    KubeClient,
    KubeError,
)
from tether.adapters.kubernetes.webhook_certs import CA_FILE, MUTATING_WEBHOOKS, inject_ca_bundle
from tether.adapters.sandbox.kube_emulator.karmada_scheduler import detector_rewrite
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.binding_history import BindingHistory
from tether.adapters.testing.tether_stack import Stack, delete_cluster_scoped, excluded, tether_stack
from tether.core.commands import ResumeBinding
from tether.core.decision import RETRY_MAX_MS
from tether.core.events import BindingAdmissionDecided, ObjectObserved
from tether.core.keys import ADMISSION_ANNOTATION, RELEASED_ANNOTATION

pytestmark = pytest.mark.cluster


History = BindingHistory  # (every spec.clusters of the namespace's bindings, from a watch)


@contextlib.asynccontextmanager
async def admission_stack(env: KubeEnv, tmp: Path, *, managed: bool = False, scheduler_conf: str = "",
                          options: dict[str, Any] | None = None,
                          plugin_options: dict[str, Any] | None = None) -> AsyncIterator[Stack]:
    """A stack with the binding webhook registered and queue admission on; ``options``: more daemon options (the
    webhook server's self-signed CA is ``tmp/certs`` + ``CA_FILE``, for another webhook to trust);
    ``plugin_options``: more fields of the catalog plugin's entry; ``managed``: Deployments of the namespace
    queue-managed, with ``scheduler_conf`` as the admission ConfigMap's ``volcano-scheduler.conf``."""
    env.require_loopback_webhooks()
    await env.register_crds("scheduling.volcano.sh_queues")
    certs = tmp / "certs"
    options = {"binding_webhook": True, "webhook_port": 0, "webhook_host": "127.0.0.1", "webhook_self_signed": True,
               "webhook_cert_dir": str(certs), "webhook_extra_names": ["127.0.0.1", "localhost"],
               "admission": True, "admission_configmap": f"{env.namespace}/tether-admission", **(options or {})}
    kube = KubeClient(env.api_client)
    if managed:
        data = {"queue-managed": f"kinds: [apps/Deployment]\nnamespaces: [{env.namespace}]\n",
                **({"volcano-scheduler.conf": scheduler_conf} if scheduler_conf else {})}
        await kube.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": "tether-admission", "namespace": env.namespace},
                                       "data": data}, namespace=env.namespace)
    async with tether_stack(env, daemon_options=options, plugin_options=plugin_options) as stack:
        assert stack.daemon is not None and stack.daemon.webhook is not None
        name = f"tether-test-rb-{secrets.token_hex(3)}"
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "resourcebindings.tether.dev", "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 5,
                "reinvocationPolicy": "IfNeeded",
                "clientConfig": {"url": f"https://127.0.0.1:{stack.daemon.webhook.port}/mutate/resourcebindings"},
                "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["work.karmada.io"],
                           "apiVersions": ["v1alpha2"], "resources": ["resourcebindings"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.namespace}},
            }],
        }
        await stack.kube.create(MUTATING_WEBHOOKS, config)
        try:
            await inject_ca_bundle(stack.kube, name, (certs / CA_FILE).read_bytes())
            yield stack
        finally:
            with contextlib.suppress(KubeError):
                await delete_cluster_scoped(stack.kube, MUTATING_WEBHOOKS, name)


def binding(stack: Stack, name: str, workload: str, *, cpu: str = "1") -> dict[str, Any]:
    """A Deployment's binding as Karmada's detector makes it, placed Divided (Weighted: Karmada has no assignment
    for Divided without a preference) among the stack's own Clusters."""
    namespace = stack.namespace
    placement = {"clusterAffinity": {"clusterNames": stack.own_clusters()},
                 "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted"}}
    return {"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"propagationpolicy.karmada.io/permanent-id": "test-policy"}},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workload,
                                  "namespace": namespace},
                     "replicas": 1, "replicaRequirements": {"resourceRequest": {"cpu": cpu}},
                     "placement": placement}}


async def test_a_bound_claims_binding_is_never_scheduled_away_from_its_data(karmada_kube: KubeEnv,
                                                                           tmp_path: Path) -> None:
    async with admission_stack(karmada_kube, tmp_path) as stack:
        history = History(stack.kube, stack.namespace)
        await history.start()
        try:
            table = stack.add_table("orders", "east")
            await stack.apply(manifests.claim("orders", namespace=stack.namespace, table=table, workload="etl"))
            await stack.wait_claim("orders", phase="Bound")
            created = await stack.apply(binding(stack, "etl-deployment", "etl"))
            west = stack.clusters["west1"]
            assert west in excluded(created)  # the stored object already carries the constraint
            east = {stack.clusters["east1"], stack.clusters["east2"]}

            # settled (a real scheduler writes its status after spec.clusters): the rewrite is guarded by this read
            rb = await stack.wait_scheduled("etl-deployment", None)
            rewritten = await stack.kube.patch(BINDINGS, "etl-deployment", detector_rewrite(rb, {
                "clusterAffinity": {"clusterNames": sorted([*east, west])},
                "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}), namespace=stack.namespace,
                content_type=JSON_PATCH)
            assert west in excluded(rewritten)  # undone in the same request
            # Divided put the one replica on one east cluster; the rewrite's Duplicated puts it on both — once the
            # watch has seen that, the rewrite was rescheduled (and every version up to it is in the history)
            await stack.wait_scheduled("etl-deployment", east)
            await stack.eventually(lambda: asyncio.sleep(0, any(set(names) == east for names in
                                                                history.clusters.get("etl-deployment", []))),
                                   what="the rewrite rescheduled, seen by the watch")
            await stack.wait_idle()
            # the webhook's patches, the executor's writes and the scheduler's: none is taken for a competitor's
            assert stack.daemon is not None and stack.daemon.competing is not None
            assert stack.daemon.competing.foreign == 0
        finally:
            await history.stop()
        seen = history.clusters["etl-deployment"]
        assert any(seen) and all(set(names) <= east for names in seen), seen
        # each decision is in the log: --explain shows it, --diff re-derives it from the world it was decided on
        assert stack.log is not None
        trail = await explain(stack.log, f"ResourceBinding/{stack.namespace}/etl-deployment")
        decisions = [e.event for e in trail.events if isinstance(e.event, BindingAdmissionDecided)]
        assert [d.operation for d in decisions][:1] == ["CREATE"] and decisions[0].patch
        assert any(d.operation == "UPDATE" and d.patch for d in decisions)  # the detector rewrite, undone
        _, differences = await diff(stack.log)
        assert [(d.kind, d.admission, d.detail) for d in differences if d.admission] == []


async def test_a_resolving_claim_holds_its_binding_until_the_placement_is_in(karmada_kube: KubeEnv,
                                                                             tmp_path: Path) -> None:
    async with admission_stack(karmada_kube, tmp_path) as stack:
        table = stack.add_table("clicks", "west")
        # the lookup takes a while: the claim stays Resolving (long enough for a real API server's latencies)
        stack.catalog.delay_next(1, 2.5, table=table)
        await stack.apply(manifests.claim("clicks", namespace=stack.namespace, table=table, workload="train"))
        await stack.wait_claim("clicks", reason="Resolving")
        created = await stack.apply(binding(stack, "train-deployment", "train"))
        assert created["spec"]["suspension"] == {"scheduling": True}
        assert "Resolving" in created["metadata"]["annotations"][ADMISSION_ANNOTATION]
        # a probe: a binding created after it and free to go. Once Karmada has scheduled the probe and tether has
        # decided on every event up to the probe's scheduled version, both have had their turn at the held binding
        # (no sleep that hopes they did)
        await stack.apply(binding(stack, "probe-deployment", "probe"))
        await stack.wait_scheduled("probe-deployment", None)
        scheduled_probe = await stack.logged(f"ResourceBinding/{stack.namespace}/probe-deployment",
                                             lambda e: isinstance(e, ObjectObserved)
                                             and bool(e.obj.spec_dict().get("clusters")))
        await stack.decided_through(scheduled_probe)
        held = await stack.get("ResourceBinding", "train-deployment")
        assert held is not None and (held["spec"].get("suspension") or {}).get("scheduling")  # still held ...
        assert not held["spec"].get("clusters") and not (held.get("status") or {}).get("conditions")  # untouched
        decided = await stack.commands_for(f"ResourceBinding/{stack.namespace}/train-deployment")
        assert not [c for c in decided if isinstance(c.command, ResumeBinding)]  # ... and tether did not let it go
        assert stack.catalog.stats()["in_flight"] == 1  # (all this while the lookup was still out)

        async def scheduled() -> dict[str, Any] | None:
            rb = await stack.get("ResourceBinding", "train-deployment")
            return rb if rb and rb["spec"].get("clusters") else None

        rb = await stack.eventually(scheduled, what="scheduled after resume")
        assert {c["name"] for c in rb["spec"]["clusters"]} == {stack.clusters["west1"]}
        assert ADMISSION_ANNOTATION not in (rb["metadata"].get("annotations") or {})


class BindingWatch:
    """A watch of the namespace's bindings from now on, resumed where the server ends it: each event goes to
    :meth:`seen` (type, object) in the order the server made the versions."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.versions: dict[str, str] = {}  # binding → the resourceVersion last seen
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        items, version = await self.kube.list(BINDINGS, namespace=self.namespace)
        self.versions = {b["metadata"]["name"]: b["metadata"]["resourceVersion"] for b in items}  # (as listed)
        self.task = asyncio.create_task(self._run(version))

    async def _run(self, version: str) -> None:
        while True:  # the server ends a watch now and then: resume where it ended
            async for event in self.kube.watch(BINDINGS, resource_version=version, namespace=self.namespace):
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                name = meta.get("name")
                if not name or event.get("type") == "BOOKMARK":
                    continue
                self.seen(str(event.get("type")), obj)
                self.versions[name] = version

    def seen(self, type_: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    async def caught_up(self) -> list[dict[str, Any]] | None:
        """The namespace's bindings, once the watch has seen every one of them at its listed version."""
        items, _ = await self.kube.list(BINDINGS, namespace=self.namespace)
        seen = all(self.versions.get(b["metadata"]["name"]) == b["metadata"]["resourceVersion"] for b in items)
        return items if seen else None

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


class Running(BindingWatch):
    """Which bindings are running (not suspended) after every change the server made, by queue, and the most that
    ever ran at once in each — every intermediate state, not only the last."""

    def __init__(self, kube: KubeClient, namespace: str, queue_of: Callable[[str], str]) -> None:
        super().__init__(kube, namespace)
        self.queue_of = queue_of
        self.running: dict[str, set[str]] = {}
        self.most: dict[str, int] = {}

    def seen(self, type_: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        queue = self.queue_of(name)
        running = self.running.setdefault(queue, set())
        if type_ == "DELETED" or ((obj.get("spec") or {}).get("suspension") or {}).get("scheduling"):
            running.discard(name)
        else:
            running.add(name)
        self.most[queue] = max(self.most.get(queue, 0), len(running))


async def test_a_burst_of_200_bindings_across_4_queues_respects_order_and_capability(karmada_kube: KubeEnv,
                                                                                     tmp_path: Path) -> None:
    """What admission promises, and no more: a queue's capability is never exceeded, not for an instant; a queue
    with more demand than capability runs exactly its capability; and of two bindings of equal priority, the
    older one is not held while the younger runs — where their creation times differ. A creationTimestamp has a
    one-second resolution and UIDs are random, so two bindings created in the same second are not ordered: the
    one created later may sort first and still find its queue full (admission decides as bindings arrive)."""
    async with admission_stack(karmada_kube, tmp_path, managed=True) as stack:
        suffix = stack.suffix
        queues = [f"q{i}-{suffix}" for i in range(4)]
        capability = 30
        running = Running(stack.kube, stack.namespace, lambda name: queues[int(name.rsplit("-", 1)[1]) % 4])
        try:
            for name in queues:
                await stack.kube.create(QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                                 "metadata": {"name": name},
                                                 "spec": {"weight": 1, "capability": {"cpu": str(capability)}}})
            for i, queue in enumerate(queues):
                # no replicas: on a real cluster the Deployment stays a template (its queue annotation is the point)
                deployment = manifests.deployment(f"w{i}", namespace=stack.namespace, replicas=0)
                deployment["spec"]["template"]["metadata"]["annotations"] = {
                    "scheduling.volcano.sh/queue-name": queue}
                await stack.kube.create(DEPLOYMENTS, deployment, namespace=stack.namespace)
            await stack.wait_idle()
            await running.start()
            created: dict[str, list[dict[str, Any]]] = {q: [] for q in queues}
            for n in range(200):  # one after the other: creation time never decreases along n
                i = n % 4
                rb = await stack.apply(binding(stack, f"rb-{n:03d}", f"w{i}"))
                assert rb["spec"]["suspension"] == {"scheduling": True}
                created[queues[i]].append(rb)

            async def settled() -> list[dict[str, Any]] | None:
                items, _ = await stack.kube.list(BINDINGS, namespace=stack.namespace)
                unsuspended = [b for b in items if not (b["spec"].get("suspension") or {}).get("scheduling")]
                held = [b for b in items if ADMISSION_ANNOTATION in (b["metadata"].get("annotations") or {})
                        and (b["spec"].get("suspension") or {}).get("scheduling")]
                return items if len(unsuspended) == 4 * capability and len(held) == 200 - 4 * capability else None

            await stack.eventually(settled, within=60, what="120 admitted, 80 held with a reason")
            await stack.wait_idle()  # decided all it will: what is running now is what admission settled on
            items = await stack.eventually(running.caught_up, what="the watch caught up with the list")
            assert running.most == {q: capability for q in queues}  # never past the capability, at any moment
            by_name = {b["metadata"]["name"]: b for b in items}
            first_admitted = []
            expected = {"allocated": {"cpu": str(capability)}, "running": capability, "pending": 50 - capability}
            for queue in queues:
                names = [b["metadata"]["name"] for b in created[queue]]
                admitted = [n for n in names if not (by_name[n]["spec"].get("suspension") or {}).get("scheduling")]
                held = [n for n in names if n not in admitted]
                assert len(admitted) == capability and running.running[queue] == set(admitted), queue
                # binding order where it is defined: every held binding is at least as young as every admitted one
                # (priority is equal; same-second ties go either way)
                newest_admitted = max(by_name[n]["metadata"]["creationTimestamp"] for n in admitted)
                oldest_held = min(by_name[n]["metadata"]["creationTimestamp"] for n in held)
                assert newest_admitted <= oldest_held, (queue, newest_admitted, oldest_held)
                async def queue_status(queue: str = queue) -> dict[str, Any] | None:
                    status = (await stack.kube.get(QUEUES, queue) or {}).get("status") or {}
                    return status if {k: status.get(k) for k in expected} == expected else None

                # the Queue's status is written by the next admission cycle (a timer), not by the last decision
                await stack.eventually(queue_status, what=f"{queue}'s status: {expected}")
                reason = f"queue {queue}: cpu {capability + 1}/{capability}"

                async def held_for_capacity(held: list[str] = held, reason: str = reason) -> bool:
                    # (the webhook's "waiting for admission" until the next cycle says why)
                    for name in held:
                        rb = await stack.get("ResourceBinding", name) or {}
                        if (rb.get("metadata", {}).get("annotations") or {}).get(ADMISSION_ANNOTATION) != reason:
                            return False
                    return True

                await stack.eventually(held_for_capacity, what=f"every binding held in {queue}: {reason!r}")
                first_admitted.append(min(admitted))

            async def scheduled() -> bool:
                for name in first_admitted:
                    rb = await stack.get("ResourceBinding", name)
                    if not (rb and rb["spec"].get("clusters")):
                        return False
                return True

            await stack.eventually(scheduled, within=stack.scheduling_within,
                                   what="admitted bindings scheduled by Karmada")
        finally:
            await running.stop()
            for name in queues:
                with contextlib.suppress(KubeError):
                    await delete_cluster_scoped(stack.kube, QUEUES, name)


#: The catalog's own breaker opens after two failed requests and half-opens a second later, as a real outage reads.
BREAKER = {"circuitBreaker": {"failureThreshold": 2, "resetTimeout": "1s"}}
#: How long the next lookup retry may take once the catalog is back: the decider's backoff doubles from 5 s up to
#: RETRY_MAX_MS, and on a loaded machine the outage lasts through more retries than the few seconds it takes alone.
RETRY_WITHIN = RETRY_MAX_MS / 1000 + 60


async def _outage(stack: Stack, table: str) -> None:
    """The catalog down for every table load; the claim's lookup failed (503, then the circuit open), transient."""
    stack.catalog.fail_next(1_000_000, status=503)
    await stack.apply(manifests.claim("clicks", namespace=stack.namespace, table=table, workload="train"))
    await stack.wait_claim("clicks", reason="LookupFailed")


async def _no_differences(stack: Stack) -> None:
    assert stack.log is not None
    _, differences = await diff(stack.log)
    assert [(d.kind, d.causation, d.admission, d.detail) for d in differences] == []


async def test_a_catalog_outage_holds_a_new_binding_until_the_data_is_located(karmada_kube: KubeEnv,
                                                                              tmp_path: Path) -> None:
    async with admission_stack(karmada_kube, tmp_path, plugin_options=BREAKER) as stack:
        history = History(stack.kube, stack.namespace)
        await history.start()
        try:
            table = stack.add_table("clicks", "west")
            await _outage(stack, table)
            created = await stack.apply(binding(stack, "train-deployment", "train"))
            assert created["spec"]["suspension"] == {"scheduling": True}
            hold = created["metadata"]["annotations"][ADMISSION_ANNOTATION]
            assert f"{stack.namespace}/clicks (LookupFailed); the catalog fails transiently" in hold

            # the decider retries the lookup (5 s later) and it fails again: the binding is still held after that
            asked = stack.catalog.requests_for(table)
            await stack.eventually(lambda: asyncio.sleep(0, stack.catalog.requests_for(table) > asked),
                                   what="the lookup retried", within=30)
            await stack.wait_claim("clicks", reason="LookupFailed")
            await stack.wait_idle(within=60)
            held = await stack.get("ResourceBinding", "train-deployment")
            assert held is not None and held["spec"]["suspension"] == {"scheduling": True}
            assert not held["spec"].get("clusters")

            stack.catalog.clear_faults()  # the catalog is back: the next retry locates the data
            west = stack.clusters["west1"]
            rb = await stack.wait_scheduled("train-deployment", {west}, within=RETRY_WITHIN)
            assert ADMISSION_ANNOTATION not in (rb["metadata"].get("annotations") or {})
            await stack.wait_idle(within=60)
        finally:
            await history.stop()
        seen = history.clusters["train-deployment"]
        assert any(seen) and all(set(names) <= {west} for names in seen), seen  # never anywhere else
        assert stack.log is not None
        trail = await explain(stack.log, f"ResourceBinding/{stack.namespace}/train-deployment")
        [decided] = [e.event for e in trail.events if isinstance(e.event, BindingAdmissionDecided)
                     and e.event.operation == "CREATE"]
        assert decided.suspended and "LookupFailed" in decided.reason
        await _no_differences(stack)


async def test_a_catalog_down_past_max_hold_releases_the_binding_without_the_data_constraint(
        karmada_kube: KubeEnv, tmp_path: Path) -> None:
    async with admission_stack(karmada_kube, tmp_path, plugin_options=BREAKER, options={"max_hold": 2.0}) as stack:
        table = stack.add_table("clicks", "west")
        await _outage(stack, table)
        created = await stack.apply(binding(stack, "train-deployment", "train"))
        assert created["spec"]["suspension"] == {"scheduling": True}
        assert "held 2s at most" in created["metadata"]["annotations"][ADMISSION_ANNOTATION]

        async def released() -> dict[str, Any] | None:
            rb = await stack.get("ResourceBinding", "train-deployment")
            text = ((rb or {}).get("metadata") or {}).get("annotations", {}).get(RELEASED_ANNOTATION)
            return rb if text and (rb or {}).get("spec", {}).get("clusters") else None

        rb = await stack.eventually(released, what="released at the bound and scheduled", within=60)
        text = rb["metadata"]["annotations"][RELEASED_ANNOTATION]
        assert text.startswith(f"released without the data constraint after 2s: claim {stack.namespace}/clicks: "
                               f"looking up amoro/table/{table} failed: ")

        async def warned() -> list[tuple[str, str]] | None:
            events = await stack.events_for("train-deployment")
            return [(e["type"], e["message"]) for e in events if e.get("reason") == "ReleasedWithoutData"] or None

        assert await stack.eventually(warned, what="the ReleasedWithoutData Event") == [("Warning", text)]

        stack.catalog.clear_faults()  # the catalog is back: tether moves the workload to its data
        west = stack.clusters["west1"]
        rb = await stack.wait_scheduled("train-deployment", {west}, within=RETRY_WITHIN)

        async def cleared() -> bool:
            held = await stack.get("ResourceBinding", "train-deployment")
            return RELEASED_ANNOTATION not in (((held or {}).get("metadata") or {}).get("annotations") or {})

        await stack.eventually(cleared, what="the released annotation gone once the data constraint is in", within=60)
        await stack.wait_idle(within=60)
        await _no_differences(stack)
