"""Pod placement end to end: tether's daemon on the Karmada API, member clusters, pods gated then placed.

The member is an emulated one (its own emulator with the pod binder on: ungated pods are bound by node affinity and
allocatable) or, with ``TETHER_TEST_KUBECONFIG``, **the real cluster itself**, its own kube-scheduler binding the
pods once tether has removed the gate, on Nodes the test creates for itself (tainted with the test's own key, a
rack label key of its own, a namespace of its own: ``adapters/testing/member.py``). The Godel PodGroup and Fluid
CRDs are installed on it. The pods are created with tether's scheduling gate, as the pod webhook adds it.

Where a test needs a second member that goes away, that one is emulated on both (a real cluster cannot be stopped
by a test); the first is the real cluster when there is one.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Awaitable
from typing import Any

import pytest

from tether.adapters.kubernetes.members import EVENTS, FLUID, JOBS, POD_GROUPS, PODS
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.member import (
    CRDS,
    FLUID_CRDS,
    GODEL_CRDS,
    TestMember,
    default_service_account,
    member,
    members_options,
)
from tether.adapters.testing.reference import require_reference
from tether.adapters.testing.tether_stack import eventually, tether_stack
from tether.core.keys import HOSTNAME_LABEL


async def create_group(m: TestMember, name: str, size: int, *, cpu: str = "1") -> None:
    await m.kube.create(POD_GROUPS, {"apiVersion": POD_GROUPS.api_version, "kind": "PodGroup",
                                     "metadata": {"name": name, "namespace": m.namespace}, "spec": {
                                         "minMember": size, "affinity": {"podGroupAffinity": {
                                             "required": [{"topologyKey": m.rack_key}]}}}}, namespace=m.namespace)
    for i in range(size):
        await m.kube.create(PODS, m.pod(f"{name}-{i}", cpu=cpu,
                                        annotations={"godel.bytedance.com/pod-group-name": name}),
                            namespace=m.namespace)


async def placements(m: TestMember, prefix: str) -> dict[str, str]:
    pods, _ = await m.kube.list(PODS, namespace=m.namespace)
    return {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName", "") for p in pods
            if p["metadata"]["name"].startswith(prefix)}


async def all_bound(m: TestMember, prefix: str) -> dict[str, str] | None:
    found = await placements(m, prefix)
    return found if found and all(found.values()) else None


async def test_gated_groups_land_in_one_domain_and_a_lost_member_leaves_the_other_alone(kube: KubeEnv) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with member(kube, "m1", tmp) as m1, \
                member(kube, "m2", tmp, emulated=True, namespace=m1.namespace) as m2, \
                tether_stack(kube, daemon_options=members_options(m1, m2)) as stack:
            # 16 pods of 1 CPU fit in one rack (4 nodes x 8 CPU); the member's scheduler alone would spread them
            # over every rack (it prefers the least-allocated node), so one rack means tether's affinity decided it
            await create_group(m1, "gang", 16)
            await create_group(m2, "gang", 16)
            done1 = await eventually(lambda: all_bound(m1, "gang-"), "m1 group bound", within=30)
            done2 = await eventually(lambda: all_bound(m2, "gang-"), "m2 group bound", within=30)
            assert len(m1.racks_of(done1)) == 1 and len(m2.racks_of(done2)) == 1

            # m2 goes away: m1 keeps deciding, and nothing of m1's is touched
            assert m2.emulator is not None
            await m2.emulator.stop()
            await create_group(m1, "late", 4)
            late = await eventually(lambda: all_bound(m1, "late-"), "m1 second group bound", within=30)
            assert len(m1.racks_of(late)) == 1
            assert await placements(m1, "gang-") == done1
            await stack.wait_idle()


async def test_a_member_without_fluid_still_places_groups(kube: KubeEnv) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with member(kube, "m1", tmp, crds=GODEL_CRDS) as m1, \
                tether_stack(kube, daemon_options={**m1.daemon_options(), "absent_retry": 0.2}) as stack:
            await create_group(m1, "gang", 4)
            done = await eventually(lambda: all_bound(m1, "gang-"), "the group bound", within=30)
            assert len(m1.racks_of(done)) == 1
            assert stack.daemon is not None and stack.daemon.members is not None
            sources = stack.daemon.members.members["m1"].sources
            # the member does not serve Fluid (on a real cluster whose Fluid CRDs the test cannot take away: a group
            # nobody serves stands for it) and serves Godel
            optional = {FLUID[0].group, POD_GROUPS.group}
            assert {s.resource.kind: s.absent for s in sources if s.resource.group in optional} == {
                **{r.kind: True for r in FLUID}, POD_GROUPS.kind: False}


@pytest.mark.parametrize(("policy", "crds"), [("Require", CRDS), ("Prefer", CRDS), ("Require", FLUID_CRDS)],
                         ids=["Require", "Prefer", "Require-member-without-Godel"])
async def test_a_data_process_follows_its_data_load(kube: KubeEnv, policy: str, crds: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with member(kube, "m1", tmp, crds=crds) as m1, \
                tether_stack(kube, daemon_options=m1.daemon_options()) as stack:
            ns, load_res, process_res = m1.namespace, FLUID[0], FLUID[2]
            # the loader pod ran on a node far from where the scheduler would put a fresh pod
            target = m1.node(3, 3)
            await _load_finished_on(m1, target)
            process = await m1.kube.create(process_res, {
                "apiVersion": process_res.api_version, "kind": "DataProcess",
                "metadata": {"name": "proc", "namespace": ns},
                # valid under Fluid's own schema: a dataset's mountPath and a script's source are required
                "spec": {"dataset": {"name": "d", "namespace": ns, "mountPath": "/data"},
                         "processor": {"script": {"image": "x", "source": "echo processed"}},
                         "runAfter": {"kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": policy}}}},
                namespace=ns)
            # Fluid's controller has reconciled it (its status, which tether's condition needs: operation_status)
            await m1.kube.patch(process_res, "proc", {"status": {"phase": "Pending", "duration": "Unfinished",
                                                                 "conditions": []}}, namespace=ns, subresource="status")
            process_job = await m1.kube.create(JOBS, _job(m1, "proc-job", "DataProcess", process), namespace=ns)
            await m1.kube.create(PODS, m1.pod("proc-pod", owner=_owned_by(process_job)), namespace=ns)
            await m1.kube.patch(load_res, "load", {"status": {"phase": "Complete", "duration": "5s", "conditions": []}},
                                namespace=ns, subresource="status")  # (Fluid's status schema requires all three)
            bound = await eventually(lambda: all_bound(m1, "proc-pod"), "proc-pod bound", within=30)
            assert bound == {"proc-pod": target}
            pod = await m1.kube.get(PODS, "proc-pod", namespace=ns)
            assert pod is not None
            affinity = pod["spec"]["affinity"]["nodeAffinity"]
            key = ("requiredDuringSchedulingIgnoredDuringExecution" if policy == "Require"
                   else "preferredDuringSchedulingIgnoredDuringExecution")
            assert key in affinity and len(affinity) == 1

            async def inherited() -> str:
                op = await m1.kube.get(process_res, "proc", namespace=ns)
                conditions = {c["type"]: c for c in ((op or {}).get("status") or {}).get("conditions") or []}
                return str(conditions.get("AffinityInherited", {}).get("status", ""))

            # the condition is its own write, after the pod's release (it may still say False, "waiting", before)
            await eventually(lambda: _is(inherited(), "True"), "AffinityInherited True", within=30)
            assert stack.daemon is not None and stack.daemon.members is not None
            [godel] = [s for s in stack.daemon.members.members["m1"].sources if s.resource.kind == POD_GROUPS.kind]
            assert godel.absent == (crds == FLUID_CRDS)  # a member without Godel: its PodGroups not served


async def _is(value: Awaitable[str], expected: str) -> bool:
    return await value == expected


def _owned_by(obj: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference to ``obj``, by its real uid (a real garbage collector deletes what an absent owner owns)."""
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"]}


def _job(m: TestMember, name: str, kind: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A Job of a Fluid operation. Its pods are the test's own (no Job controller creates any on the real cluster
    the tests use, and none on the emulator); the template is only what the API requires of a Job."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": name, "namespace": m.namespace, "ownerReferences": [{**_owned_by(owner), "kind": kind}]},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "tolerations": [m.env.toleration()],
                                       "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}}


async def _load_finished_on(m: TestMember, node: str) -> None:
    """DataLoad ``load`` of dataset ``d``, whose loader pod ran on ``node`` and finished."""
    ns, load_res = m.namespace, FLUID[0]
    load = await m.kube.create(load_res, {
        "apiVersion": load_res.api_version, "kind": "DataLoad", "metadata": {"name": "load", "namespace": ns},
        "spec": {"dataset": {"name": "d", "namespace": ns}}}, namespace=ns)
    load_job = await m.kube.create(JOBS, _job(m, "load-job", "DataLoad", load), namespace=ns)
    loader = m.pod("load-pod", gated=False, owner=_owned_by(load_job))
    loader["spec"]["nodeName"] = node
    await m.kube.create(PODS, loader, namespace=ns)
    await m.kube.patch(PODS, "load-pod", {"status": {"phase": "Succeeded"}}, namespace=ns, subresource="status")


async def test_fluids_own_schema_gets_the_outcome_as_an_event_then_the_condition_once_fluid_wrote_its_status(
        kube: KubeEnv) -> None:
    """Fluid's real CRDs (``../shared/reference/fluid``) in the member: their status schema refuses a status without
    ``phase`` and ``duration`` (``422``, as a real server with Fluid's CRDs did). A DataProcess no Fluid controller
    has reconciled gets the inheritance as an Event, and the condition once Fluid writes its status — next to
    Fluid's conditions, its phase and duration untouched — and again after Fluid rebuilds its conditions; the
    API refuses nothing tether writes.

    The member is emulated beside a real cluster too: the real cluster's Fluid CRDs are whichever were installed
    first (shared, never replaced), and Fluid's schema served from a group of the test's own would not do — the
    operations' Jobs name their owner in ``data.fluid.io``, and a real garbage collector deletes what an absent
    owner owns."""
    from tether.adapters.cli.replay.trail import explain
    from tether.core.events import CommandFailed

    fluid = require_reference("fluid")
    crds = ("scheduling.godel.kubewharf.io_podgroups", *sorted(fluid.glob("data.fluid.io_*.yaml")))
    with tempfile.TemporaryDirectory() as tmp:
        async with member(kube, "m1", tmp, crds=crds, emulated=True) as m1, \
                tether_stack(kube, daemon_options=m1.daemon_options()) as stack:
            ns, load_res, process_res = m1.namespace, FLUID[0], FLUID[2]
            target = m1.node(2, 1)
            await _load_finished_on(m1, target)
            process = await m1.kube.create(process_res, {
                "apiVersion": process_res.api_version, "kind": "DataProcess",
                "metadata": {"name": "proc", "namespace": ns},
                "spec": {"dataset": {"name": "d", "namespace": ns, "mountPath": "/data"},
                         "processor": {"script": {"image": "x", "source": "true"}},
                         "runAfter": {"kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": "Require"}}}},
                namespace=ns)
            process_job = await m1.kube.create(JOBS, _job(m1, "proc-job", "DataProcess", process), namespace=ns)
            await m1.kube.create(PODS, m1.pod("proc-pod", owner=_owned_by(process_job)), namespace=ns)
            await m1.kube.patch(load_res, "load", {"status": {"phase": "Complete", "duration": "5s", "conditions": []}},
                                namespace=ns, subresource="status")
            assert await eventually(lambda: all_bound(m1, "proc-pod"), "proc-pod bound", within=30) == {
                "proc-pod": target}

            async def reported() -> list[dict[str, Any]] | None:
                events, _ = await m1.kube.list(EVENTS, namespace=ns)
                found = [e for e in events if (e.get("involvedObject") or {}).get("name") == "proc"
                         and e.get("reason") == "AffinityInherited"]
                return found or None

            assert f"inherited from DataLoad/{ns}/load" in (await eventually(reported, "the Event", within=30))[0][
                "message"]
            await stack.wait_idle()
            unreconciled = await m1.kube.get(process_res, "proc", namespace=ns)
            assert unreconciled is not None and "status" not in unreconciled  # nothing Fluid would refuse

            async def conditions(*types: str) -> dict[str, Any] | None:
                op = await m1.kube.get(process_res, "proc", namespace=ns)
                held = {c["type"]: c for c in ((op or {}).get("status") or {}).get("conditions") or []}
                return op if all(t in held for t in types) else None

            fluids = {"type": "Processing", "status": "True", "reason": "Fluid", "message": "Fluid's own",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}
            await m1.kube.patch(process_res, "proc", {"status": {"phase": "Executing", "duration": "Unfinished",
                                                                 "conditions": [fluids]}}, namespace=ns,
                                subresource="status")  # Fluid's controller reconciles it
            op = await eventually(lambda: conditions("Processing", "AffinityInherited"), "the condition", within=30)
            assert (op["status"]["phase"], op["status"]["duration"]) == ("Executing", "Unfinished")
            assert [c["status"] for c in op["status"]["conditions"]] == ["True", "True"]
            complete = {**fluids, "type": "Complete", "reason": "Done"}
            await m1.kube.patch(process_res, "proc", {"status": {"phase": "Complete", "duration": "12s",
                                                                 "conditions": [complete]}}, namespace=ns,
                                subresource="status")  # Fluid rebuilds its conditions without tether's
            op = await eventually(lambda: conditions("Complete", "AffinityInherited"), "the condition again",
                                  within=30)
            assert (op["status"]["phase"], op["status"]["duration"]) == ("Complete", "12s")
            await stack.wait_idle()
            assert stack.log is not None
            trail = await explain(stack.log, f"m1:DataProcess/{ns}/proc")
            assert [e.event for e in trail.events if isinstance(e.event, CommandFailed)] == []


async def test_explain_shows_why_a_pod_went_where_it_did(kube: KubeEnv) -> None:
    from tether.adapters.cli.replay.trail import explain

    with tempfile.TemporaryDirectory() as tmp:
        async with member(kube, "m1", tmp) as m1, tether_stack(kube, daemon_options=m1.daemon_options()) as stack:
            ns = m1.namespace
            await create_group(m1, "solo", 2)
            bound = await eventually(lambda: all_bound(m1, "solo-"), "group bound", within=30)
            await stack.wait_idle()
            assert stack.log is not None
            trail = await explain(stack.log, f"m1:Pod/{ns}/solo-0")  # = --explain Pod/NS/solo-0 --cluster m1
            commands = [c for cs in trail.caused.values() for c in cs if c.key == f"m1:Pod/{ns}/solo-0"]
            assert [type(c.command).__name__ for c in commands] == ["ReleasePod"]
            [rack] = m1.racks_of(bound)
            assert f"PodGroup {ns}/solo" in commands[0].reason and f"{m1.rack_key}={rack}" in commands[0].reason
            assert any(r.key == f"m1:Pod/{ns}/solo-0" for r in trail.events)  # the pod's own observations


async def test_a_group_required_on_the_hostname_lands_on_one_node(kube: KubeEnv) -> None:
    """A 3-pod PodGroup, required topology ``kubernetes.io/hostname`` and restricted by its ``nodeSelector`` to
    the test's nodes: tether pins every pod to one node (a required ``hostname In [node]`` term) and removes the
    gate; the member's scheduler (the emulator's binder, or the real kube-scheduler) binds them there."""
    size, group = 3, "host"
    with tempfile.TemporaryDirectory() as tmp:
        async with member(kube, "m1", tmp, racks=2, per_rack=2) as m1, \
                tether_stack(kube, daemon_options=m1.daemon_options()):
            ns, candidates = m1.namespace, sorted(m1.racks)
            await m1.kube.create(POD_GROUPS, {
                "apiVersion": POD_GROUPS.api_version, "kind": "PodGroup", "metadata": {"name": group, "namespace": ns},
                "spec": {"minMember": size, "affinity": {"podGroupAffinity": {
                    "required": [{"topologyKey": HOSTNAME_LABEL}],
                    "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": HOSTNAME_LABEL, "operator": "In", "values": candidates}]}]}}}}}, namespace=ns)
            for i in range(size):
                await m1.kube.create(PODS, m1.pod(f"{group}-{i}", cpu="10m", annotations={
                    "godel.bytedance.com/pod-group-name": group}), namespace=ns)
            placed = await eventually(lambda: all_bound(m1, f"{group}-"), "the group bound by the member's scheduler",
                                      within=30)
            [node] = set(placed.values())
            assert len(placed) == size and node in candidates
            for name in placed:
                pod = await m1.kube.get(PODS, name, namespace=ns)
                assert pod is not None and not pod["spec"].get("schedulingGates")
                terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                    "nodeSelectorTerms"]
                # tether's decision, not the scheduler's whim: every term pins the pod to that one node
                pinned = {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
                assert terms and all(pinned in t.get("matchExpressions", []) for t in terms), terms


async def test_a_daemon_confined_to_one_member_namespace_places_only_its_pods(kube: KubeEnv) -> None:
    """``member_namespace``: the member's pods and PodGroups of other namespaces are not watched, so not placed —
    what keeps another run's daemon on a shared member off this run's pods. Nodes are still watched whole."""
    with tempfile.TemporaryDirectory() as tmp:
        async with member(kube, "m1", tmp, racks=2, per_rack=2) as m1:
            other = await _another_namespace(m1)
            await create_group(dataclasses.replace(m1, namespace=other), "elsewhere", 2)
            options = {**m1.daemon_options(), "member_namespace": m1.namespace}
            async with tether_stack(kube, daemon_options=options) as stack:
                await create_group(m1, "here", 2)
                await eventually(lambda: all_bound(m1, "here-"), "the group of the daemon's namespace bound", within=30)
                await stack.wait_idle()
                assert stack.daemon is not None
                state = stack.daemon.world.members.clusters["m1"]
                assert state.pods and all(key.split("/")[1] == m1.namespace for key in state.pods)
                assert set(m1.racks) <= set(state.nodes)
                pods, _ = await m1.kube.list(PODS, namespace=other)
                assert len(pods) == 2 and all(p["spec"].get("schedulingGates") for p in pods)


async def _another_namespace(m: TestMember) -> str:
    if m.emulator is not None:
        await m.emulator.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
        return "other"
    namespace = await m.env.create_namespace("tether-test-other")
    await default_service_account(m.kube, namespace)
    return namespace
