"""One webhook server for both webhooks, each path ready on its own part of the world; webhook traffic to the
leader only.

* The ResourceBinding webhook and the pod webhook share one HTTPS port and certificate. The binding path waits
  for the control plane's lists, the pod path only for its member's: a control-plane list pending leaves the pod
  webhook answering, an unknown or listing member leaves the binding webhook answering.
* A standby that serves a webhook is not ready (``/readyz`` 503), so the webhook Service routes to the leader
  only — with ``failurePolicy: Fail`` a standby's 503 would refuse the request, the API server does not try another
  endpoint. A standby that serves no webhook stays ready. Once it leads, it is ready and answers.

The member is an emulated one, or with ``TETHER_TEST_KUBECONFIG`` the real cluster itself (``adapters/testing/
member.py``); the webhooks are called by the test, not by an API server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp

from tether.adapters.daemon.daemon import Daemon
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.webhook_certs import ensure_self_signed
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.clock import ManualClock, next_attempt
from tether.adapters.testing.member import member
from tether.adapters.testing.tether_stack import eventually, spawn_daemon, tether_stack
from tether.core.envelope import EventRecord
from tether.core.events import ListsStarted, event_key

# client-go's timings; the electors' time is a ManualClock the test moves (see test_daemon.py)
LEASE = {"leader_elect": True, "lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}


def review(uid: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": "CREATE", "namespace": namespace, "object": obj}}


def pod(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}


async def post(daemon: Daemon, ca: bytes, path: str, body: dict[str, Any]) -> tuple[int, str]:
    assert daemon.webhook is not None
    context = ssl.create_default_context(cadata=ca.decode())
    async with aiohttp.ClientSession() as http, http.post(
            f"https://127.0.0.1:{daemon.webhook.port}{path}", json=body, ssl=context) as response:
        return response.status, await response.text()


async def readyz(daemon: Daemon) -> tuple[int, str]:
    assert daemon.endpoints is not None
    async with aiohttp.ClientSession() as http, http.get(
            f"http://127.0.0.1:{daemon.endpoints.port}/readyz") as response:
        return response.status, await response.text()


async def test_both_webhooks_on_one_port_each_waiting_only_for_its_own_lists(kube: KubeEnv, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    _, _, ca = ensure_self_signed(certs, names=["127.0.0.1"])
    async with member(kube, "m1", tmp_path, racks=1, per_rack=1) as m1, tether_stack(kube, daemon_options={
            "binding_webhook": True, "pod_webhook": True, "webhook_port": 0, "webhook_host": "127.0.0.1",
            "webhook_cert_dir": str(certs), **m1.daemon_options()}) as stack:
        daemon = stack.daemon
        assert daemon is not None and daemon.webhook is not None and daemon.cfg.pod_webhook
        assert sorted(daemon.webhook.handlers) == ["/mutate/pods/{cluster}", "/mutate/resourcebindings"]
        ns = stack.namespace
        binding = review("b1", ns, manifests.resource_binding("etl", namespace=ns))

        async def member_listed() -> bool:
            state = daemon.world.members.clusters.get("m1")
            return state is not None and not state.lists_pending

        await eventually(member_listed, "member m1 listed")
        assert (await post(daemon, ca, "/mutate/resourcebindings", binding))[0] == 200
        assert (await post(daemon, ca, "/mutate/pods/m1", review("p1", ns, pod(ns))))[0] == 200
        status, text = await post(daemon, ca, "/mutate/pods/elsewhere", review("p2", ns, pod(ns)))
        assert status == 503 and "elsewhere" in text  # that member's problem only:
        assert (await post(daemon, ca, "/mutate/resourcebindings", binding))[0] == 200

        # a control-plane list that has not ended (as during a relist): bindings wait, the member's pods do not
        assert stack.log is not None
        started = ListsStarted(sources=("NeverListed",))
        await stack.log.append("events", [EventRecord(at_ms=int(time.time() * 1000), source="test",
                                                      key=event_key(started), event=started)])
        await eventually(lambda: asyncio.sleep(0, bool(daemon.world.lists_pending)), "the list pending")
        status, text = await post(daemon, ca, "/mutate/resourcebindings", binding)
        assert status == 503 and "lists pending" in text
        assert (await post(daemon, ca, "/mutate/pods/m1", review("p3", ns, pod(ns))))[0] == 200

        assert daemon.endpoints is not None
        async with aiohttp.ClientSession() as http, http.get(
                f"http://127.0.0.1:{daemon.endpoints.port}/metrics") as response:
            metrics = await response.text()
        # one histogram, labelled by webhook path
        assert 'tether_webhook_seconds_count{outcome="not-serving",webhook="/mutate/resourcebindings"} 1.0' in metrics
        assert 'tether_webhook_seconds_count{outcome="allowed",webhook="/mutate/pods/{cluster}"} 2.0' in metrics


async def test_a_standby_serving_a_webhook_is_not_ready_one_serving_none_is(kube: KubeEnv, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    _, _, ca = ensure_self_signed(certs, names=["127.0.0.1"])
    options = {**LEASE, "identity": "first", "binding_webhook": True, "webhook_port": 0,
               "webhook_host": "127.0.0.1", "webhook_cert_dir": str(certs)}
    clock = ManualClock()
    async with tether_stack(kube, daemon_options=options, lease_clock=clock) as stack:
        assert stack.cfg is not None and stack.daemon is not None
        assert stack.daemon.ready() == (True, "ready")  # the leader
        logs = [await SqliteLog.open(str(tmp_path / f"{name}.db")) for name in ("second", "third")]
        serving = dataclasses.replace(stack.cfg, identity="second", log_url=f"sqlite:///{tmp_path}/second.db")
        plain = dataclasses.replace(stack.cfg, identity="third", log_url=f"sqlite:///{tmp_path}/third.db",
                                    binding_webhook=False)
        standby, stop, task = await spawn_daemon(serving, stack.env, logs[0], lease_clock=clock)
        other, stop_other, task_other = await spawn_daemon(plain, stack.env, logs[1], lease_clock=clock)
        try:
            await eventually(lambda: asyncio.sleep(0, standby.webhook is not None and other.endpoints is not None),
                             "the standbys up")
            electors = [stack.daemon.leader, standby.leader, other.leader]
            assert all(e is not None for e in electors)
            await clock.settle(3)
            for _ in range(3):  # three retry periods, each standby has tried again: both keep waiting
                await next_attempt(clock, electors, seconds=LEASE["retry_period"])  # type: ignore[arg-type]
                assert standby.leader is not None and not standby.leader.is_leader.is_set()
                assert other.leader is not None and not other.leader.is_leader.is_set()
            status, text = await readyz(standby)
            assert status == 503 and "standby" in text  # out of the webhook Service's endpoints
            assert other.webhook is None and await readyz(other) == (200, "standby (not the leader)\n")
            binding = review("b1", stack.namespace, manifests.resource_binding("etl", namespace=stack.namespace))
            status, text = await post(standby, ca, "/mutate/resourcebindings", binding)
            assert status == 503 and "standby" in text  # what the Service no longer sends it

            stop_other.set()
            await asyncio.wait_for(task_other, 10)
            assert await stack.stop_daemon() == 0  # the leader goes (a rollout): the standby takes over
            await next_attempt(clock, [standby.leader], seconds=LEASE["retry_period"])  # type: ignore[list-item]
            await asyncio.wait_for(standby.started.wait(), 10)
            await eventually(lambda: asyncio.sleep(0, standby.ready()[0]), "the new leader ready")
            assert await readyz(standby) == (200, "ready\n")
            assert (await post(standby, ca, "/mutate/resourcebindings", binding))[0] == 200
        finally:
            for event, running in ((stop, task), (stop_other, task_other)):
                event.set()
                await asyncio.wait_for(running, 10)
            for log in logs:
                await log.close()
