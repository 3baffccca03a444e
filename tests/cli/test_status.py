"""``tether status`` against a running daemon (the integration stack on the emulator, or TETHER_TEST_KUBECONFIG).

The daemon runs with queue admission; the scene has one claim bound, one on a table the catalog does not have (a
recent error), and two suspended bindings in a queue with room for one (one admitted, one held). ``GET /status``
must say all of it, and ``tether status`` must render it (and print it as JSON with ``--json``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from tether.adapters.cli import main
from tether.adapters.cli.status import SHOWN_DECISIONS, fetch_status, render_status
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CONFIGMAPS, DEPLOYMENTS, QUEUES, KubeError
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack

pytestmark = pytest.mark.cluster


def suspended(rb: dict[str, Any] | None) -> bool:
    return bool((((rb or {}).get("spec") or {}).get("suspension") or {}).get("scheduling"))


async def admission_scene(stack: Stack, queue: str) -> None:
    await stack.kube.create(QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                     "metadata": {"name": queue}, "spec": {"weight": 1, "capability": {"cpu": "4"}}})
    for workload in ("w1", "w2"):
        deployment = manifests.deployment(workload, namespace=stack.namespace, replicas=0)
        deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": queue}
        await stack.kube.create(DEPLOYMENTS, deployment, namespace=stack.namespace)
    await stack.wait_idle()
    # created held, as the binding webhook creates them; each asks 1 cpu on each of the stack's 3 clusters (its
    # placement duplicates it): one fits the queue's 4
    for workload in ("w1", "w2"):
        await stack.apply(stack.binding(workload, suspended=True, cpu="1"))

    async def one_admitted_one_held() -> bool:
        items, _ = await stack.kube.list(BINDINGS, namespace=stack.namespace)
        return sorted(suspended(b) for b in items) == [False, True]

    await stack.eventually(one_admitted_one_held, what="one binding admitted, one held")


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, ["status", *args], catch_exceptions=False)


async def test_status_of_a_running_daemon(kube: KubeEnv) -> None:
    await kube.register_crds("scheduling.volcano.sh_queues")
    kube_client_namespace = kube.namespace
    async with contextlib.AsyncExitStack() as exits:
        from tether.adapters.kubernetes.client import KubeClient

        client = KubeClient(kube.api_client)
        await client.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": "tether-admission", "namespace": kube_client_namespace},
                                         "data": {"queue-managed": "kinds: [apps/Deployment]\nnamespaces: "
                                                                   f"[{kube_client_namespace}]\n"}},
                            namespace=kube_client_namespace)
        stack = await exits.enter_async_context(tether_stack(kube, daemon_options={
            "admission": True, "admission_configmap": f"{kube_client_namespace}/tether-admission"}))
        queue = f"q-{stack.suffix}"
        exits.push_async_callback(_delete_queue, stack, queue)
        table = stack.add_table("orders", "east")
        await stack.apply(manifests.claim("orders", namespace=stack.namespace, table=table, workload="etl"))
        await stack.apply(manifests.claim("refunds", namespace=stack.namespace, table=stack.table("refunds"),
                                          workload="refunds"))
        await stack.wait_claim("orders", phase="Bound")
        await stack.wait_claim("refunds", reason="DataSourceNotFound")
        await admission_scene(stack, queue)
        await stack.wait_idle()
        assert stack.daemon is not None and stack.daemon.endpoints is not None
        url = f"http://127.0.0.1:{stack.daemon.endpoints.port}"

        doc = await asyncio.to_thread(fetch_status, url)
        assert doc["daemon"]["ready"] is True and doc["daemon"]["identity"] == stack.daemon.cfg.identity
        assert doc["leader"] == {"election": False, "leading": True, "identity": stack.daemon.cfg.identity,
                                 "holder": stack.daemon.cfg.identity, "lease": ""}
        events = doc["log"]["streams"]["events"]
        assert events["consumer"] == "decider" and int(events["end"]["0"]) > 0
        assert 0 <= int(events["position"]["0"]) <= int(events["end"]["0"])
        assert events["lag"] == int(events["end"]["0"]) - int(events["position"]["0"])
        assert set(doc["log"]["streams"]) == {"events", "commands"}
        world = doc["world"]
        assert (world["claims"], world["claims_bound"], world["claims_pending"]) == (2, 1, 1)
        assert world["data_sources"] >= 1 and world["lists_pending"] == []
        [q] = [q for q in doc["admission"]["queues"] if q["name"] == queue]
        assert (q["held_count"], q["admitted_count"], q["open"], q["weight"]) == (1, 1, True, 1)
        held, admitted = q["held"][0], q["admitted"][0]
        assert {held, admitted} == {f"{stack.namespace}/w1-deployment", f"{stack.namespace}/w2-deployment"}
        assert doc["admission"]["config_error"] == ""
        members = {m["name"]: m for m in doc["members"]}
        for cluster in stack.clusters.values():
            assert members[cluster]["karmada_ready"] is True and members[cluster]["connected"] is False
        assert {w["resource"] for w in doc["watches"]} >= {f"datasourceclaims@{stack.namespace}", "clusters"}
        assert all(w["synced"] for w in doc["watches"] if not w["absent"])
        assert doc["decisions"] and all(d["command"] != "StartTimer" for d in doc["decisions"])
        resumed = [d for d in doc["decisions"] if d["command"] == "ResumeBinding"]
        assert [d["key"] for d in resumed][:1] == [f"ResourceBinding/{stack.namespace}/{admitted.split('/')[1]}"]
        not_found = [e for e in doc["errors"] if e["reason"] == "NotInCatalog"]
        assert not_found and stack.table("refunds") in not_found[0]["key"] and not_found[0]["source"] == "catalog"

        screen = await asyncio.to_thread(cli, "--url", url)
        assert screen.exit_code == 0, screen.output
        out = screen.output
        assert "leader (no election)" in out and "ready" in out
        assert "last decisions" in out and "recent errors" in out and "NotInCatalog" in out
        assert queue in out and f"1: {held}" in out and f"1: {admitted}" in out
        assert "2 (1 bound, 1 pending)" in out
        # the screen of this very document: the newest decisions and errors, one line each
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(render_status(doc, url=url))
        drawn = console.export_text()
        for decision in doc["decisions"][:SHOWN_DECISIONS]:
            assert f"{decision['command']} " in drawn and decision["key"] in drawn, drawn
        assert len(doc["decisions"]) <= SHOWN_DECISIONS or "tether status --json shows them all" in drawn
        as_json = await asyncio.to_thread(cli, "--url", url, "--json")
        assert as_json.exit_code == 0, as_json.output
        assert json.loads(as_json.output)["admission"]["queues"]


async def _delete_queue(stack: Stack, queue: str) -> None:
    with contextlib.suppress(KubeError):
        await stack.kube.delete(QUEUES, queue)


async def test_status_of_a_standby(kube: KubeEnv) -> None:
    """A replica that does not hold the Lease answers too: standby, and who leads."""
    async with tether_stack(kube, daemon_options={"leader_elect": True, "lease_name": "tether-status-test",
                                                   "retry_period": 0.1}) as stack:
        assert stack.daemon is not None and stack.daemon.endpoints is not None and stack.cfg is not None
        leader_url = f"http://127.0.0.1:{stack.daemon.endpoints.port}"

        async def leading() -> dict[str, Any] | None:  # (the stack's daemon is ready while it still campaigns)
            seen = await asyncio.to_thread(fetch_status, leader_url)
            return seen if seen["leader"]["leading"] else None

        doc = await stack.eventually(leading, what="the first replica leads")
        assert doc["leader"]["election"] is True and doc["leader"]["holder"] == doc["leader"]["identity"]
        assert doc["leader"]["lease"] == f"{stack.namespace}/tether-status-test"
        leader_identity = doc["leader"]["identity"]
        from tether.adapters.testing.tether_stack import spawn_daemon

        assert stack.log is not None
        standby_cfg = type(stack.cfg)(**{**stack.cfg.__dict__, "identity": "standby-replica"})
        standby, stop, task = await spawn_daemon(standby_cfg, stack.env, stack.log)
        try:
            assert standby.endpoints is not None
            standby_url = f"http://127.0.0.1:{standby.endpoints.port}"

            async def knows_the_leader() -> dict[str, Any] | None:
                seen = await asyncio.to_thread(fetch_status, standby_url)
                return seen if seen["leader"]["holder"] == leader_identity else None

            seen = await stack.eventually(knows_the_leader, what="the standby names the leader")
            assert seen["leader"]["leading"] is False and seen["leader"]["identity"] == "standby-replica"
            assert seen["world"] is None and seen["decisions"] == []
            screen = await asyncio.to_thread(cli, "--url", standby_url)
            assert screen.exit_code == 0, screen.output
            assert f"standby; leader: {leader_identity}" in screen.output
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
