"""A member cluster for pod-placement tests: an emulated member, or the real cluster itself.

Pod placement needs a member whose nodes the test knows: racks of nodes, a node where a finished pod ran. On the
emulator, :func:`member` starts a private emulator with its binder on (the member's scheduler) and creates the
nodes there. With ``TETHER_TEST_KUBECONFIG`` the member is **the real cluster itself**, connected by its kubeconfig
as ``tether run --member NAME=KUBECONFIG`` would be, and its kube-scheduler binds the pods. That cluster is shared,
so the test brings its own world into it and takes it away again:

- **Nodes of its own** (:meth:`KubeEnv.create_node`): unique names, a NoSchedule taint of the environment's own key
  that the test's pods tolerate (:meth:`TestMember.pod`) — nobody else's pod lands there, and the test's pods land
  nowhere else — a Ready condition and allocatable. No kubelet runs them: a pod is bound, never started.
- **A rack label key of its own** (:attr:`TestMember.rack_key`): the nodes of another run carry other keys, so a
  group required on this key can only be placed on this test's nodes.
- **A namespace of its own** for the pods, PodGroups and Fluid operations, and the daemon watches only that one on
  the member (``DaemonConfig.member_namespace``): another run's daemon on the same cluster does not place this
  run's pods, nor this one theirs.
- **Another project's CRDs** (Godel's PodGroup, Fluid's operations) are installed when missing — the real ones
  from ``../shared/reference`` when present, else tether's minimal schemas — and never deleted (a CRD is shared).
  An emulated member serves the same real ones, so that a test's objects are valid under the schemas of the
  projects they imitate on the emulator as on a real cluster that carries them.
  A CRD that is already there is used as it is. A member **without** one of the two projects cannot be had by
  deleting its CRDs there: the daemon is told instead that the project's group is served from a group of the
  test's own that nobody serves (``DaemonConfig.api_groups``, :attr:`TestMember.api_groups`), and its kinds are
  not served on that member, as on most real clusters.

Everything else is deleted by the environment when the test ends, however it ends: the test's pods are deleted
with grace period 0 (bound to a node no kubelet serves, they would hold their namespace in Terminating for ever),
then its Nodes and namespaces.

The same test code runs on both: node names come from :meth:`TestMember.node`, the namespace from
:attr:`TestMember.namespace`, the daemon's options from :meth:`TestMember.daemon_options`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tether.adapters.kubernetes.client import KubeClient, Resource
from tether.adapters.kubernetes.webhook_certs import MUTATING_WEBHOOKS
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import KUBECONFIG_ENV, KubeEnv, create_test_node
from tether.adapters.testing.reference import reference_path
from tether.core.keys import (
    NAMESPACE_NAME_LABEL,
    PLACEMENT_GATE,
    POD_GROUP_ANNOTATION,
    POD_PLACEMENT_LABEL,
    TEST_RACK_LABEL_PREFIX,
)

GODEL_CRDS = ("scheduling.godel.kubewharf.io_podgroups",)
FLUID_CRDS = ("data.fluid.io_dataloads", "data.fluid.io_dataprocesses", "data.fluid.io_datamigrates",
              "data.fluid.io_databackups")
CRDS = GODEL_CRDS + FLUID_CRDS
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
_REFERENCE_DIRS = {"scheduling.godel.kubewharf.io": "godel", "data.fluid.io": "fluid"}


@dataclass
class TestMember:
    """One member cluster as a test sees it (module doc)."""

    __test__ = False  # (not a pytest test class)

    name: str  # the member's name in tether's configuration (``--member NAME=...``)
    kube: KubeClient
    kubeconfig: str
    namespace: str  # where the test's pods, PodGroups and Fluid operations live on the member
    rack_key: str  # the label key of the racks (a key of the test's own on a real cluster)
    racks: dict[str, str]  # node name → rack
    env: KubeEnv
    emulator: KubeEmulator | None = None
    # the optional groups this member must not serve, each to a group nobody serves (real cluster only; module doc)
    api_groups: dict[str, str] = field(default_factory=dict)
    _nodes: dict[tuple[int, int], str] = field(default_factory=dict)

    @property
    def is_emulated(self) -> bool:
        return self.emulator is not None

    def node(self, rack: int, index: int) -> str:
        """The name of node ``index`` of rack ``rack``."""
        return self._nodes[(rack, index)]

    def daemon_options(self) -> dict[str, Any]:
        """What ``tether_stack(daemon_options=...)`` needs to connect this member (and only watch its namespace on
        a real cluster)."""
        return members_options(self)

    def pod(self, name: str = "", *, generate_name: str = "", cpu: str = "1", gated: bool = True,
            annotations: dict[str, str] | None = None, owner: dict[str, Any] | None = None) -> dict[str, Any]:
        """A pod of the test in the member's namespace: tolerating the test's nodes' taint, gone at once when
        deleted, gated with tether's gate unless ``gated=False`` (as the pod webhook would leave it)."""
        meta: dict[str, Any] = {"namespace": self.namespace, "annotations": annotations or {}}
        if name:
            meta["name"] = name
        else:
            meta["generateName"] = generate_name
        if owner is not None:
            meta["ownerReferences"] = [owner]
        spec: dict[str, Any] = {
            "tolerations": [self.env.toleration()], "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": {"cpu": cpu}}}]}
        if gated:
            spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def racks_of(self, placed: dict[str, str]) -> set[str]:
        """The racks of the nodes ``placed`` names (pod → node)."""
        return {self.racks[node] for node in placed.values()}

    async def register_pod_webhook(self, configuration: dict[str, Any], *, within: float = 30.0) -> None:
        """Register a pod webhook configuration (e.g. the shipped one, its URL and caBundle set) for this member's
        namespace only, and wait until the member's API server calls it.

        On a shared cluster the configuration is the test's: a name of its own, deleted when the environment ends,
        and a ``namespaceSelector`` narrowed to the member's namespace — another run's namespace opted in to pod
        placement at the same time must not send its pods to this test's daemon. The namespace is labelled
        :data:`POD_PLACEMENT_LABEL` ``enabled``, as a user opts in. A real API server starts calling a new
        configuration a moment after it is created: a dry-run pod of a PodGroup (answered, never recorded, by
        tether's webhook: ``sideEffects: NoneOnDryRun``) is created until it comes back gated."""
        body = copy.deepcopy(configuration)
        body["metadata"]["name"] = f"{body['metadata']['name']}-{secrets.token_hex(4)}"
        for hook in body["webhooks"]:
            selector = hook.setdefault("namespaceSelector", {})
            selector.setdefault("matchExpressions", []).append(
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [self.namespace]})
        await self.kube.patch(NAMESPACES, self.namespace, {"metadata": {"labels": {POD_PLACEMENT_LABEL: "enabled"}}})
        if not self.is_emulated:  # (an emulated member goes with its configurations)
            name = body["metadata"]["name"]
            self.env.defer(lambda: self.kube.delete(MUTATING_WEBHOOKS, name))
        await self.kube.create(MUTATING_WEBHOOKS, body)
        probe = self.pod(generate_name="webhook-probe-", gated=False,
                         annotations={POD_GROUP_ANNOTATION: "webhook-probe"})
        core = client.CoreV1Api(self.kube.api)
        deadline = time.monotonic() + within
        while True:
            answer = await core.create_namespaced_pod(self.namespace, probe, dry_run="All")
            if any(g.name == PLACEMENT_GATE for g in answer.spec.scheduling_gates or []):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the pod webhook not called by {self.name}'s API server after {within}s")
            await asyncio.sleep(0.1)


def members_options(*members: TestMember) -> dict[str, Any]:
    """The daemon's options for these members: their kubeconfigs, and on a real cluster the member namespace
    (``DaemonConfig.member_namespace``: this run's only — the members must then share it)."""
    options: dict[str, Any] = {"members": {m.name: m.kubeconfig for m in members}}
    if not all(m.is_emulated for m in members):
        [namespace] = {m.namespace for m in members}
        options["member_namespace"] = namespace
    groups = {k: v for m in members for k, v in m.api_groups.items()}
    if groups:
        options["api_groups"] = groups
    return options


@contextlib.asynccontextmanager
async def member(env: KubeEnv, name: str, tmp: str | Path, *, racks: int = 4, per_rack: int = 4,
                 crds: tuple[str | Path, ...] = CRDS, namespace: str = "",
                 emulated: bool = False) -> AsyncIterator[TestMember]:
    """A member with ``racks`` x ``per_rack`` nodes (8 CPU each) and the optional APIs of ``crds`` (module doc).
    ``namespace``: the member namespace to use (default: "ml" on an emulated member, a fresh one of the
    environment's on a real cluster). ``emulated``: an emulated member even beside a real cluster (a member the
    test stops, a second member)."""
    sources = [c if isinstance(c, Path) else _crd_source(c) for c in crds]  # the real schemas, when present
    if env.is_emulated or emulated:
        async with KubeEmulator(binder=True, crds=sources) as emulator:
            api = client.ApiClient(emulator.configuration())
            try:
                directory = Path(tmp) / name
                directory.mkdir()
                namespace = namespace or "ml"
                await emulator.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
                found = TestMember(name=name, kube=KubeClient(api), kubeconfig=str(emulator.kubeconfig_path(directory)),
                                   namespace=namespace, rack_key="rack", racks={}, env=env, emulator=emulator)
                core = client.CoreV1Api(api)
                for r in range(racks):
                    for n in range(per_rack):
                        node = f"{name}-r{r}-n{n}"
                        await create_test_node(core, node, taint_key=env.taint_key,
                                               labels={found.rack_key: f"rack{r}", "zone": "z1"})
                        found._nodes[(r, n)], found.racks[node] = node, f"rack{r}"
                yield found
            finally:
                await api.close()
        return
    await env.register_crds(*sources)
    namespace = namespace or await env.create_namespace("tether-test-ml")
    kube = KubeClient(env.api_client)
    wanted = {_group(c) for c in crds}
    absent = {g: f"{g.split('.')[0]}-{secrets.token_hex(4)}.absent.tether.test" for g in map(_group, CRDS)
              if g not in wanted}
    found = TestMember(name=name, kube=kube, kubeconfig=os.environ[KUBECONFIG_ENV], namespace=namespace,
                       rack_key=f"{TEST_RACK_LABEL_PREFIX}{secrets.token_hex(4)}", racks={}, env=env, api_groups=absent)
    for r in range(racks):
        for n in range(per_rack):
            node = await env.create_node(f"{name}-r{r}-n{n}", labels={found.rack_key: f"rack{r}", "zone": "z1"})
            found._nodes[(r, n)], found.racks[node] = node, f"rack{r}"
    await default_service_account(kube, namespace)
    yield found  # the environment deletes the pods, Nodes and namespace


def _group(crd: str | Path) -> str:
    """The API group of a CRD named by its file stem (``group_plural``) or given by such a file."""
    return (crd.stem if isinstance(crd, Path) else crd).split("_", 1)[0]


def _crd_source(name: str) -> str | Path:
    """Another project's real CRD from ``../shared/reference`` when present, else tether's minimal schema."""
    directory = _REFERENCE_DIRS.get(_group(name))
    found = reference_path(directory, f"{name}.yaml") if directory else None
    return found if found is not None else name


async def default_service_account(kube: KubeClient, namespace: str, *, within: float = 30.0) -> None:
    """A pod is refused until kube-controller-manager has made the namespace's default ServiceAccount."""
    deadline = time.monotonic() + within
    while await kube.get(SERVICE_ACCOUNTS, "default", namespace=namespace) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"no default ServiceAccount in {namespace} after {within}s")
        await asyncio.sleep(0.1)
