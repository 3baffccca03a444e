"""``tether replay --explain`` answers for **every key** of a log written with both webhooks, queue admission and pod
placement on (issue 21.4: a binding with a webhook decision in the log made the renderer raise ``TypeError:
Encoding objects of type msgspec.Raw is unsupported`` — with the webhook on, that was every binding).

One daemon serves the ResourceBinding webhook (registered on the control plane's admission chain) and the pod
webhook (registered on an emulated member, as ``ops/members`` ships it), with queue admission and a claim's data
constraint on the same workload. The log then holds every kind of record the daemon writes: observations and lists
of both planes, catalog answers, the binding webhook's decisions (CREATE, suspended), resumes and holds, queue
statuses, the pod webhook's answers (gated and not, named and by request uid), releases of pods, PodGroup Events,
timers. ``--explain`` is asked about each key, and about the workload, whose chain must show both webhooks.

The member is an emulator, or with ``TETHER_TEST_KUBECONFIG`` the real cluster itself — the control plane is then
its own member, as the workload's namespace is the same on both — with Nodes of the test's own
(``adapters/testing/member.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import tempfile
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from tether.adapters.cli import main
from tether.adapters.cli.replay.command import explain_command
from tether.adapters.cli.replay.trail import Bounds, index_of
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import DEPLOYMENTS, QUEUES, KubeError
from tether.adapters.kubernetes.members import POD_GROUPS, PODS
from tether.adapters.kubernetes.webhook_certs import CA_FILE
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.member import member
from tether.adapters.testing.tether_stack import eventually

from .test_admission_e2e import admission_stack, binding
from .test_pod_webhook import GROUP_ANNOTATION, _listed, shipped_webhook


async def test_explain_answers_every_key_of_a_log_with_both_webhooks_admission_and_pod_placement(
        karmada_kube: KubeEnv, tmp_path: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # the member's namespace is the workload's
        async with member(karmada_kube, "m1", tmp, namespace=karmada_kube.namespace) as m1, admission_stack(
                karmada_kube, tmp_path, managed=True, options={**m1.daemon_options(), "pod_webhook": True}) as stack:
            ns, daemon = stack.namespace, stack.daemon
            assert ns == m1.namespace
            assert daemon is not None and daemon.webhook is not None and stack.log is not None
            # the member: the workload's namespace, opted in to pod placement, and the shipped pod webhook
            url = f"https://127.0.0.1:{daemon.webhook.port}/mutate/pods/m1"
            await eventually(lambda: _listed(daemon, "m1"), "member m1 listed", within=20)
            await m1.register_pod_webhook(shipped_webhook(url=url, ca=(tmp_path / "certs" / CA_FILE).read_bytes()))

            # the control plane: a queue with room for one binding; two queue-managed workloads, one with a claim
            queue = f"q-{stack.suffix}"
            await stack.kube.create(QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                             "metadata": {"name": queue},
                                             "spec": {"weight": 1, "capability": {"cpu": "1"}}})
            try:
                for name in ("etl", "big"):
                    deployment = manifests.deployment(name, namespace=ns, replicas=0)
                    deployment["spec"]["template"]["metadata"]["annotations"] = {
                        "scheduling.volcano.sh/queue-name": queue}
                    await stack.kube.create(DEPLOYMENTS, deployment, namespace=ns)
                table = stack.add_table("orders", "east")
                await stack.apply(manifests.claim("orders", namespace=ns, table=table, workload="etl"))
                await stack.wait_claim("orders", phase="Bound")
                created = await stack.apply(binding(stack, "etl-deployment", "etl"))
                assert created["spec"].get("suspension") == {"scheduling": True}  # the webhook: queue-managed
                await stack.apply(binding(stack, "big-deployment", "big"))

                async def decided() -> tuple[str, str] | None:
                    """(admitted, held): both were created in one second, so either may go first (by uid)."""
                    running, held = [], []
                    for name in ("etl", "big"):
                        rb = await stack.get("ResourceBinding", f"{name}-deployment")
                        if rb is None:
                            return None
                        if not (rb["spec"].get("suspension") or {}).get("scheduling"):
                            running.append(name)
                        elif "cpu 2/1" in (rb["metadata"].get("annotations") or {}).get("tether.dev/admission", ""):
                            held.append(name)
                    return (running[0], held[0]) if len(running) == len(held) == 1 else None

                admitted, held = await stack.eventually(decided, within=30, what="one admitted, one held")

                # the member: a group the webhook gates and the decider places, and a pod it admits unchanged
                await m1.kube.create(POD_GROUPS, {"apiVersion": POD_GROUPS.api_version, "kind": "PodGroup",
                                                  "metadata": {"name": "etl", "namespace": ns}, "spec": {
                                                      "minMember": 2, "affinity": {"podGroupAffinity": {
                                                          "required": [{"topologyKey": m1.rack_key}]}}}},
                                     namespace=ns)
                for _ in range(2):
                    await m1.kube.create(PODS, m1.pod(generate_name="etl-", gated=False,
                                                      annotations={GROUP_ANNOTATION: "etl"}), namespace=ns)
                await m1.kube.create(PODS, m1.pod(generate_name="plain-", gated=False), namespace=ns)

                async def group_bound() -> bool:
                    pods, _ = await m1.kube.list(PODS, namespace=ns)
                    group = [p for p in pods if p["metadata"]["name"].startswith("etl-")]
                    return len(group) == 2 and all((p.get("spec") or {}).get("nodeName") for p in group)

                await eventually(group_bound, "the group bound", within=20)
                await stack.wait_idle()

                index = index_of(stack.log)
                keys = sorted(set(await index.keys("events")) | set(await index.keys("commands")))
                kinds = {k.rpartition(":")[2].partition("/")[0] for k in keys}
                assert {"ResourceBinding", "Queue", "DataSourceClaim", "DataSource", "Pod", "PodAdmission",
                        "PodGroup", "Data"} <= kinds, kinds
                for key in keys:  # every key: exit 0 and an answer, never a traceback
                    out = io.StringIO()
                    code = await explain_command(stack.log, key, bounds=Bounds(), out=Console(file=out, width=300),
                                                 where="the log")
                    assert code == 0 and out.getvalue().strip(), (key, out.getvalue())

                # the workload: its chain shows the binding webhook, admission and the pod webhook's decisions
                out = io.StringIO()
                assert await explain_command(stack.log, f"deploy/{ns}/etl", bounds=Bounds(),
                                             out=Console(file=out, width=400), where="the log") == 0
                text = out.getvalue()
                chain = f"Deployment/{ns}/etl ← ResourceBinding/{ns}/etl-deployment ← DataSourceClaim/{ns}/orders"
                assert chain in text
                assert "BindingAdmissionDecided: CREATE suspended" in text
                assert ("ResumeBinding: resume" if admitted == "etl" else "SetAdmissionHold") in text
                assert "PodGateDecided" in text and "gated" in text and "ReleasePod" in text, text
                assert "  scheduled now   " in text  # spec.clusters of its latest observation, whatever it is
                if held == "etl":
                    assert "  not scheduled yet" in text.splitlines()
                out = io.StringIO()
                assert await explain_command(stack.log, f"rb/{ns}/{held}-deployment", bounds=Bounds(),
                                             out=Console(file=out, width=400), where="the log") == 0
                assert f"suspended (held: queue {queue}: cpu 2/1)" in out.getvalue()

                # and through the command line, as the issue ran it
                result = await asyncio.to_thread(CliRunner().invoke, main, [
                    "replay", f"{stack.tmp}/tether.db", "--explain", f"ResourceBinding/{ns}/etl-deployment"])
                assert result.exit_code == 0, result.output + repr(result.exception)
                assert "BindingAdmissionDecided" in result.output
            finally:
                with contextlib.suppress(KubeError):
                    await stack.kube.delete(QUEUES, queue)
