"""The member clusters' pod webhook end to end, and a member connected from its Karmada Cluster's secretRef.

The member's admission chain calls tether's webhook over HTTPS with the shipped
``ops/members/mutatingwebhookconfiguration.yaml`` (its URL and caBundle set, as the README says to): pods are
created *without* a gate — generateName, as a Job controller creates them — and the webhook gates those tether
places; the decider then places them. The member is an emulator, or with ``TETHER_TEST_KUBECONFIG`` the real
cluster itself (``adapters/testing/member.py``: Nodes of the test's own; the webhook configuration is the test's,
narrowed to its namespace, and the API server must reach the test's loopback: ``require_loopback_webhooks``).

A member connected from its Karmada Cluster is emulated on both: the test reads the Cluster and its Secret from the
control plane (the real one, when there is one), and the member it names is one whose nodes it knows.
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from tether.adapters.cli.replay.trail import explain
from tether.adapters.kubernetes.client import CLUSTERS, KubeClient
from tether.adapters.kubernetes.members import POD_GROUPS, PODS, SECRETS
from tether.adapters.kubernetes.pod_webhook import GroupAppend, PodWebhook
from tether.adapters.kubernetes.webhook import AdmissionRequest, NotServing
from tether.adapters.kubernetes.webhook_certs import ensure_self_signed
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.member import member
from tether.adapters.testing.tether_stack import eventually, tether_stack
from tether.core.envelope import EventRecord
from tether.core.events import ObjectsListed, PodGateDecided
from tether.core.keys import ADMISSION_ANNOTATION, PLACEMENT_ANNOTATION
from tether.core.world import initial_world
from tether.core.world.member_state import MemberState

from .test_pod_placement import all_bound

ROOT = Path(__file__).resolve().parents[2]
GROUP_ANNOTATION = "godel.bytedance.com/pod-group-name"


def shipped_webhook(*, url: str, ca: bytes) -> dict[str, Any]:
    [config] = yaml.safe_load_all((ROOT / "ops" / "members" / "mutatingwebhookconfiguration.yaml").read_text())
    hook = config["webhooks"][0]
    hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca).decode()}
    return config


async def test_the_webhook_gates_a_groups_pods_the_decider_places_them_and_explain_shows_both(
        kube: KubeEnv) -> None:
    kube.require_loopback_webhooks()
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp) / "certs"
        _, _, ca = ensure_self_signed(certs, names=["127.0.0.1"])
        async with member(kube, "m1", tmp) as m1, tether_stack(kube, daemon_options={
                **m1.daemon_options(), "pod_webhook": True, "webhook_port": 0,
                "webhook_host": "127.0.0.1", "webhook_cert_dir": str(certs)}) as stack:
            daemon, ns = stack.daemon, m1.namespace
            assert daemon is not None and daemon.webhook is not None
            url = f"https://127.0.0.1:{daemon.webhook.port}/mutate/pods/m1"
            await eventually(lambda: _listed(daemon, "m1"), "member m1 listed", within=20)
            await m1.register_pod_webhook(shipped_webhook(url=url, ca=ca))

            await m1.kube.create(POD_GROUPS, {"apiVersion": POD_GROUPS.api_version, "kind": "PodGroup",
                                              "metadata": {"name": "gang", "namespace": ns}, "spec": {
                                                  "minMember": 8, "affinity": {"podGroupAffinity": {
                                                      "required": [{"topologyKey": m1.rack_key}]}}}}, namespace=ns)
            for _ in range(8):
                await m1.kube.create(PODS, m1.pod(generate_name="gang-", gated=False,
                                                  annotations={GROUP_ANNOTATION: "gang"}), namespace=ns)
            plain = await m1.kube.create(PODS, m1.pod(generate_name="plain-", gated=False), namespace=ns)
            assert not (plain["spec"].get("schedulingGates")) and ADMISSION_ANNOTATION not in (
                plain["metadata"].get("annotations") or {})  # nothing for tether to place: admitted unchanged

            bound = await eventually(lambda: all_bound(m1, "gang-"), "the group bound", within=30)
            assert len(bound) == 8 and len(m1.racks_of(bound)) == 1
            name = sorted(bound)[0]
            pod = await m1.kube.get(PODS, name, namespace=ns)
            assert pod is not None
            annotations = pod["metadata"]["annotations"]
            assert annotations[ADMISSION_ANNOTATION] and annotations[PLACEMENT_ANNOTATION].startswith("PodGroup gang")
            assert not pod["spec"].get("schedulingGates")
            await stack.wait_idle()

            assert stack.log is not None
            trail = await explain(stack.log, f"m1:Pod/{ns}/{name}")
            answers = [r.event for r in trail.events if isinstance(r.event, PodGateDecided)]
            assert len(answers) == 1 and answers[0].gated and answers[0].request_uid == annotations[
                ADMISSION_ANNOTATION]
            assert answers[0].generate_name == "gang-" and f"PodGroup {ns}/gang" in answers[0].reason
            assert answers[0].decided_at  # the member's log position the answer was computed at
            assert any(type(c.command).__name__ == "ReleasePod" for cs in trail.caused.values() for c in cs)
            ungated = await _decisions(stack, gated=False)
            assert any(a.generate_name == "plain-" for a in ungated)
            # the dry-run probes that waited for the API server to call the webhook were answered, never recorded
            recorded = [*ungated, *await _decisions(stack, gated=True)]
            assert not any(a.generate_name == "webhook-probe-" for a in recorded)


async def _listed(daemon: Any, cluster: str) -> bool:
    state = daemon.world.members.clusters.get(cluster)
    return state is not None and not state.lists_pending


async def _decisions(stack: Any, *, gated: bool) -> list[PodGateDecided]:
    from tether.adapters.log import aclosing_iter, scan

    out: list[PodGateDecided] = []
    async with aclosing_iter(scan(stack.log, "events")) as chunks:
        async for chunk in chunks:
            out += [r.event for r in chunk if isinstance(r.event, PodGateDecided) and r.event.gated is gated]
    return out


async def test_a_request_from_a_member_not_connected_or_still_listing_is_not_served() -> None:
    world = initial_world()
    appended: list[Any] = []

    async def append(records: Any) -> None:
        appended.extend(records)

    hook = PodWebhook(world=lambda: world, append=append)
    request = AdmissionRequest(uid="u", operation="CREATE", namespace="ml", object={"metadata": {}, "spec": {}})
    for state, expected in ((None, "not connected"), (MemberState(lists_pending={"Pod/"}), "lists pending")):
        if state is not None:
            world.members.clusters["m1"] = state
        try:
            await hook(request, cluster="m1")
        except NotServing as exc:
            assert expected in str(exc)
        else:
            raise AssertionError("answered from an incomplete member")
    assert appended == []
    world.members.clusters["m1"] = MemberState()
    answer = await hook(request, cluster="m1")  # listed: answered, and recorded
    assert answer.patch == () and [type(r.event).__name__ for r in appended] == ["PodGateDecided"]
    await hook(AdmissionRequest(uid="d", operation="CREATE", namespace="ml", object={}, dry_run=True), cluster="m1")
    assert len(appended) == 1  # a dry run is answered, never recorded


async def test_a_member_joins_from_its_karmada_cluster_secret_ref_and_leaves_no_ca_file(kube: KubeEnv) -> None:
    ca = trustme.CA().cert_pem.bytes()
    leftovers = _ca_files()
    with tempfile.TemporaryDirectory() as tmp:
        async with member(kube, "m9", tmp, emulated=True) as m9, \
                tether_stack(kube, daemon_options={"members_from_karmada": True}) as stack:
            assert m9.emulator is not None
            karmada = KubeClient(kube.api_client)
            await karmada.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {
                "name": "m9-secret", "namespace": kube.namespace}, "data": {
                "token": base64.b64encode(b"member-token").decode(), "caBundle": base64.b64encode(ca).decode()}},
                namespace=kube.namespace)
            name = f"m9-{stack.suffix}"
            kube.defer(lambda: karmada.delete(CLUSTERS, name))  # cluster-scoped: gone however the test ends
            await karmada.create(CLUSTERS, {"apiVersion": CLUSTERS.api_version, "kind": "Cluster", "metadata": {
                "name": name}, "spec": {"apiEndpoint": m9.emulator.url, "syncMode": "Push", "secretRef": {
                    "namespace": kube.namespace, "name": "m9-secret"}}})
            daemon = stack.daemon
            assert daemon is not None and daemon.members is not None
            await eventually(lambda: _listed(daemon, name), "member listed through its secretRef", within=20)
            joined = daemon.members.members[name]
            assert joined.origin == "cluster"
            assert joined.api.configuration.api_key == {"authorization": "member-token"}
            assert _ca_files() <= leftovers  # the CA file is gone
            # the member's objects are in the world under its name
            nodes = daemon.world.members.clusters[name].nodes
            assert set(nodes) == set(m9.racks) and len(nodes) == 16
            await karmada.delete(CLUSTERS, name)
            await eventually(lambda: _gone(daemon, name), "member left with its Cluster", within=20)


def _ca_files() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("tether-member-ca-*"))


async def _gone(daemon: Any, cluster: str) -> bool:
    return cluster not in daemon.members.members and cluster not in daemon.world.members.clusters


async def test_a_failed_group_append_fails_each_request_it_held_and_the_next_append_goes_on() -> None:
    """A pod webhook's record that could not be appended fails its request (the webhook's failurePolicy decides),
    never leaves it waiting; the next request is appended as usual."""
    appended: list[list[str]] = []
    broken = True

    async def append(records: Sequence[EventRecord]) -> None:
        if broken:
            raise OSError("disk full")
        appended.append([r.key for r in records])

    group = GroupAppend(append)

    def record(key: str) -> EventRecord:
        return EventRecord(at_ms=0, source="webhook", key=key, event=ObjectsListed(kind="Pod", keys=()))

    with pytest.raises(OSError, match="disk full"):
        await asyncio.wait_for(group(record("a")), 10)  # (a guard: the failure is immediate, a hang fails here)
    broken = False
    await asyncio.wait_for(group(record("b")), 10)
    assert appended == [["b"]]
