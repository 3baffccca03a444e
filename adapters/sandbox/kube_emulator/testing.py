"""Test fixtures that run the same test against the emulator or a real cluster.

``kube_environment()`` yields a :class:`KubeEnv`: a kubernetes-asyncio ``ApiClient``, a fresh namespace (random
suffix) and ``register_crds()``. Without ``TETHER_TEST_KUBECONFIG`` it starts a private :class:`KubeEmulator` on
loopback (milliseconds); with it, it talks to that cluster, creates the namespace there and registers CRDs through
the API (waiting for ``Established``).

A real cluster is shared — with other test runs, with its users, with Karmada — so the environment is careful about
what it leaves and what it takes away:

- **CRDs are installed at most once per test run and never deleted.** Deleting a CRD deletes every object of its
  kind, including other people's; and while objects still carry finalizers their owner no longer serves, the CRD
  stays Terminating for ever and every later create fails ("create not allowed while custom resource definition
  is terminating"). A CRD that already exists is used as it is (it may be Karmada's own); one that is Terminating
  is reported at once rather than through a confusing failure later.
- **Before deleting its namespaces, the environment releases the suite's own finalizers** (tether's two, and the
  ``test.tether.io/`` ones conformance tests use to hold objects) on what the test left there: the daemon that would
  have released them is gone, and a held object keeps the namespace Terminating. Other finalizers are left alone.
- Cluster-scoped objects are the test's business: name them with :data:`RUN_ID` or another unique suffix and delete
  them (``tether_stack`` does this for its Clusters and DataSources). ``env.defer(cleanup)`` runs a clean-up when
  the environment ends, whatever the test did; ``env.create_node()`` uses it for the Nodes it makes.
- **Pods are deleted with grace period 0** before their namespace. A pod bound to a Node no kubelet serves (the
  Nodes tests create, :meth:`KubeEnv.create_node`) leaves only by a forced delete; until then it holds its
  namespace in Terminating.

**Nodes of the test's own.** A real cluster's Nodes are not the test's to label, but a test may add Nodes of its
own: :meth:`KubeEnv.create_node` makes one with a unique name, the test's labels, a ``NoSchedule`` taint of the
test's own key (so that nobody else's pod lands there; the test's pods tolerate it, :meth:`KubeEnv.toleration`),
and a status written through the status subresource — ``Ready`` and allocatable — so that kube-scheduler binds pods
to it. Without a kubelet such a pod never runs: it is only bound, which is all pod placement needs.

The same clean-up runs on the emulator, so the emulator runs exercise it. ``foreign_objects=True`` seeds the
emulator with what a real Karmada always has and the test does not own (:class:`ForeignObjects`): a test that
assumes it owns every Cluster fails on the emulator too, and one that touches foreign objects is reported.

Tests that need emulator-only features call ``env.require_emulator()`` which skips with a clear reason on a real
cluster. Two other needs are checked the same way, on a real cluster only:

- ``env.require_karmada_scheduler()``: a karmada-scheduler watches that cluster (the emulator has its stand-in). A
  real one is assumed, since tether's real clusters run Karmada; set ``TETHER_TEST_KARMADA_SCHEDULER=0`` where none
  runs and the tests that need one skip.
- ``env.require_loopback_webhooks()``: the API server can call a webhook served on this machine's loopback
  (``https://127.0.0.1:PORT``), as the tests serve theirs. Assumed when the kubeconfig's server is itself on loopback
  (an API server on this machine); ``TETHER_TEST_WEBHOOK_LOOPBACK=1`` asserts it otherwise (e.g. a tunnel),
  ``=0`` denies it. The pytest fixtures ``kube`` / ``emulator`` in ``tests/conftest.py`` are thin wrappers around this.

    async def test_something(kube):
        await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
        core = kubernetes_asyncio.client.CoreV1Api(kube.api_client)
        await core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "x"}})
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tether.core.keys import CLAIM_FINALIZER, DATASOURCE_FINALIZER, HOSTNAME_LABEL, TEST_FINALIZER, TEST_TAINT_PREFIX

from . import KubeEmulator
from .crds import clean_for_create, load_crd_documents

KUBECONFIG_ENV = "TETHER_TEST_KUBECONFIG"
#: Groups of tether's own that the tests serve copies of other projects' kinds under (``reference.crd_under_group``).
OWN_GROUP_SUFFIX = ".tether.dev"
KARMADA_SCHEDULER_ENV = "TETHER_TEST_KARMADA_SCHEDULER"
WEBHOOK_LOOPBACK_ENV = "TETHER_TEST_WEBHOOK_LOOPBACK"
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
# Distinguishes this test run's cluster-scoped objects from other runs' on a shared cluster.
RUN_ID = secrets.token_hex(3)
TETHER_FINALIZERS = (CLAIM_FINALIZER, DATASOURCE_FINALIZER)
# Conformance tests hold objects with finalizers of this domain; the environment releases them should a test fail.
_TEST_FINALIZER_DOMAIN = TEST_FINALIZER.split("/")[0] + "/"
MERGE = "application/merge-patch+json"

# CRDs Established on a real cluster during this run, by (API server, CRD name): registered once per run. (Each
# emulator is new, so emulator registrations are not remembered.)
_established: set[tuple[str, str]] = set()


def suite_finalizer(name: str) -> bool:
    """Whether the test suite may release this finalizer (tether's own, or a conformance test's hold)."""
    return name in TETHER_FINALIZERS or name.startswith(_TEST_FINALIZER_DOMAIN)


def _skip(reason: str) -> NoReturn:
    """Skip the calling test, reported at the test's own location (``-rs`` then names the test, not this
    module); pytest's public ``skip`` has no such option, hence its exception, with the plain call as fallback."""
    import pytest

    try:
        exc = pytest.skip.Exception(reason, _use_item_location=True)  # type: ignore[call-arg]
    except TypeError:
        pytest.skip(reason)
    raise exc


@dataclass
class ForeignObjects:
    """What the environment seeded on the emulator that the test does not own, with each object's
    resourceVersion at the start: nobody in the test may write to them."""

    clusters: list[str]
    binding: tuple[str, str]  # (namespace, name) of a ResourceBinding in a namespace that is not the test's
    data_source: str
    versions: dict[str, str] = field(default_factory=dict)


@dataclass
class KubeEnv:
    api_client: client.ApiClient
    configuration: client.Configuration
    namespace: str
    emulator: KubeEmulator | None
    foreign: ForeignObjects | None = None
    _created_namespaces: list[str] = field(default_factory=list)
    # Namespaced custom kinds registered through this environment: (group, version, plural), for the clean-up.
    _custom_kinds: set[tuple[str, str, str]] = field(default_factory=set)
    # Clean-ups of what the test made outside its namespaces (Nodes, webhook configurations, ...), run last first.
    _deferred: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)
    # The NoSchedule taint on the Nodes this environment creates: a key of this environment's own.
    taint_key: str = field(default_factory=lambda: f"{TEST_TAINT_PREFIX}{secrets.token_hex(4)}")

    @property
    def is_emulated(self) -> bool:
        return self.emulator is not None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def require_emulator(self, why: str = "needs the tether Kubernetes emulator") -> KubeEmulator:
        """Return the emulator, or skip the calling test on a real cluster."""
        if self.emulator is None:
            _skip(f"{why}; TETHER_TEST_KUBECONFIG points at a real cluster")
        return self.emulator

    @contextlib.asynccontextmanager
    async def member_endpoint(self, *, crds: tuple[str | Path, ...] = ()) -> AsyncIterator[KubeEmulator]:
        """An API server for a member cluster whose endpoint and credentials a test makes up: the emulator itself on
        the emulator; beside a real control plane, a private emulator of its own (serving ``crds``) — the
        control plane (Clusters, their Secrets, the daemon) stays the real one."""
        if self.emulator is not None:
            yield self.emulator
            return
        async with KubeEmulator(crds=crds) as emulator:
            yield emulator

    def require_karmada_scheduler(self) -> None:
        """Skip on a real cluster declared to run no karmada-scheduler (``TETHER_TEST_KARMADA_SCHEDULER=0``). On the
        emulator the caller starts the stand-in (``KubeEmulator(karmada_scheduler=True)``)."""
        if self.emulator is None and os.environ.get(KARMADA_SCHEDULER_ENV, "1").strip().lower() in ("0", "false", "no"):
            _skip(f"needs a karmada-scheduler watching the cluster; {KARMADA_SCHEDULER_ENV}=0 says none runs")

    def loopback_webhooks(self) -> bool:
        """Whether the API server can call a webhook on this machine's loopback (module doc)."""
        if self.emulator is not None:
            return True
        declared = os.environ.get(WEBHOOK_LOOPBACK_ENV, "").strip().lower()
        if declared:
            return declared not in ("0", "false", "no")
        from urllib.parse import urlsplit

        return (urlsplit(self.configuration.host).hostname or "") in _LOOPBACK_HOSTS

    def require_loopback_webhooks(self) -> None:
        """Skip unless the API server can reach a webhook served on this machine's loopback."""
        if not self.loopback_webhooks():
            _skip(f"the test serves its webhook on this machine's loopback, which the API server at "
                  f"{self.configuration.host} cannot be assumed to reach (it is not on loopback); set "
                  f"{WEBHOOK_LOOPBACK_ENV}=1 if it can")

    def defer(self, cleanup: Callable[[], Awaitable[Any]]) -> None:
        """Run ``cleanup`` when the environment ends, however the test ends (module doc): for what a test creates
        outside its namespaces. Clean-ups run last deferred first, after the test's pods are forced out and before
        its namespaces go; one that fails does not stop the others."""
        self._deferred.append(cleanup)

    async def client_without_rights(self) -> tuple[client.ApiClient, str]:
        """A real cluster only (the emulator has no RBAC): a client acting as a ServiceAccount of the test's
        namespace that holds no role, so that the API server's own authorization refuses its every request (403)
        until the test grants it one (:meth:`grant`). Returns the client and the ServiceAccount's user name; both go
        with the environment."""
        assert self.emulator is None, "the emulator has no RBAC: inject a 403 with its fault rules"
        name = "tether-test-no-rights"
        try:
            await self.core.create_namespaced_service_account(self.namespace, {"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        user = f"system:serviceaccount:{self.namespace}:{name}"
        api = client.ApiClient(self.configuration)
        api.set_default_header("Impersonate-User", user)
        self.defer(api.close)
        return api, user

    async def grant(self, user: str, *, verbs: list[str], resources: list[str], api_group: str = "") -> str:
        """A Role of the test's namespace with ``verbs`` on ``resources``, bound to ``user`` (a real cluster), in
        force once this returns; returns its name (for :meth:`revoke`)."""
        rbac = client.RbacAuthorizationV1Api(self.api_client)
        name = f"tether-test-grant-{secrets.token_hex(3)}"
        await rbac.create_namespaced_role(self.namespace, {"metadata": {"name": name}, "rules": [
            {"apiGroups": [api_group], "resources": resources, "verbs": verbs}]})
        await rbac.create_namespaced_role_binding(self.namespace, {
            "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                    "name": name},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]})
        await self._authorized(user, verbs[0], resources[0], api_group, allowed=True)
        return name

    async def revoke(self, name: str, user: str, *, verb: str, resource: str, api_group: str = "") -> None:
        """Remove the grant ``name``; returns once ``user`` may no longer ``verb`` ``resource``."""
        rbac = client.RbacAuthorizationV1Api(self.api_client)
        await rbac.delete_namespaced_role_binding(name, self.namespace)
        await rbac.delete_namespaced_role(name, self.namespace)
        await self._authorized(user, verb, resource, api_group, allowed=False)

    async def _authorized(self, user: str, verb: str, resource: str, api_group: str, *, allowed: bool) -> None:
        """Until the API server's authorizer, which learns roles from its own watch, says ``allowed`` (a
        SubjectAccessReview)."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": user, "resourceAttributes": {"namespace": self.namespace, "verb": verb, "group": api_group,
                                                 "resource": resource}}}
        authorization = client.AuthorizationV1Api(self.api_client)
        for _ in range(100):
            if bool((await authorization.create_subject_access_review(review)).status.allowed) == allowed:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the API server does not say {user} {'may' if allowed else 'may not'} {verb} "
                             f"{resource}")

    def toleration(self) -> dict[str, str]:
        """What a pod needs to land on the Nodes of :meth:`create_node`."""
        return {"key": self.taint_key, "operator": "Exists", "effect": "NoSchedule"}

    async def create_node(self, name: str, *, labels: dict[str, str] | None = None,
                          allocatable: dict[str, str] | None = None) -> str:
        """A Node of the test's own (module doc, :func:`create_test_node`), deleted when the environment ends;
        ``name`` gets a suffix of this environment's own on a real cluster. Returns its name."""
        if self.emulator is None:
            name = f"{name}-{RUN_ID}-{self.taint_key[-8:]}"
        self.defer(lambda: self._delete_node(name))  # first: a create that fails half-way leaves nothing either
        await create_test_node(self.core, name, taint_key=self.taint_key, labels=labels, allocatable=allocatable)
        return name

    async def _delete_node(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            await self.core.delete_node(name)

    async def create_namespace(self, prefix: str = "tether-test") -> str:
        """Another fresh namespace, deleted on exit."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        await self.core.create_namespace({"metadata": {"name": name}})
        self._created_namespaces.append(name)
        return name

    async def _unborrow_names(self, ext: client.ApiextensionsV1Api, name: str, names: dict[str, Any]) -> None:
        """A copy of another kind under a group of tether's own, registered by an earlier run with the original's
        short names (``reference.crd_under_group`` now gives it none), loses them: on a shared cluster they shadowed
        the original (``kubectl get dsc`` listed the copy)."""
        stored = await ext.read_custom_resource_definition(name)
        borrowed = {k: None for k, attribute in (("shortNames", "short_names"), ("categories", "categories"))
                    if getattr(stored.spec.names, attribute, None) and not names.get(k)}
        if borrowed:
            await ext.patch_custom_resource_definition(name, {"spec": {"names": borrowed}}, _content_type=MERGE)

    async def register_crds(self, *refs: str | Path, wait_seconds: float = 30.0) -> list[str]:
        """Register CRDs (files, directories or names under ``tether/crds``) via the API; wait for Established.
        On a real cluster each CRD is registered once per run and never deleted (module doc)."""
        ext = client.ApiextensionsV1Api(self.api_client)
        names = []
        for doc in load_crd_documents(*refs):
            body = clean_for_create(doc)
            name = body["metadata"]["name"]
            names.append(name)
            spec = body.get("spec") or {}
            if spec.get("scope") == "Namespaced":
                storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), "")
                self._custom_kinds.add((spec.get("group", ""), storage, (spec.get("names") or {}).get("plural", "")))
            if self._remembered(name):
                continue
            try:
                await ext.create_custom_resource_definition(body)
            except ApiException as e:
                if e.status != 409:
                    raise
                if spec.get("group", "").endswith(OWN_GROUP_SUFFIX):
                    await self._unborrow_names(ext, name, spec.get("names") or {})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        for name in names:
            while not self._remembered(name):
                resp = await ext.read_custom_resource_definition(name, _preload_content=False)
                crd = json.loads(await resp.read())
                if crd["metadata"].get("deletionTimestamp"):
                    raise RuntimeError(
                        f"CRD {name} is being deleted on this cluster (Terminating): objects of its kind still carry "
                        f"finalizers that nobody serves. Remove those finalizers (kubectl get {name} -A) and let the "
                        f"deletion finish before running the tests.")
                conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    if self.emulator is None:
                        _established.add((self.configuration.host, name))
                    break
                if loop.time() > deadline:
                    raise TimeoutError(f"CRD {name} not Established after {wait_seconds}s")
                await asyncio.sleep(0.2)
        return names

    def _remembered(self, name: str) -> bool:
        return self.emulator is None and (self.configuration.host, name) in _established

    async def release_finalizers(self, namespace: str) -> None:
        """Remove the suite's finalizers (:func:`suite_finalizer`) from what is left in ``namespace``: custom
        objects of the kinds registered here, ConfigMaps and Deployments (the kinds conformance tests hold).
        Other finalizers stay. A write that loses a race is retried on the fresh object."""
        apps = client.AppsV1Api(self.api_client)
        kinds: list[tuple[Any, Any]] = [
            (lambda: self.core.list_namespaced_config_map(namespace, _preload_content=False),
             lambda n, b: self.core.patch_namespaced_config_map(n, namespace, b, _content_type=MERGE)),
            (lambda: apps.list_namespaced_deployment(namespace, _preload_content=False),
             lambda n, b: apps.patch_namespaced_deployment(n, namespace, b, _content_type=MERGE)),
        ]
        for group, version, plural in sorted(self._custom_kinds):
            kinds.append((
                lambda g=group, v=version, p=plural: self.custom.list_namespaced_custom_object(
                    g, v, namespace, p, _preload_content=False),
                lambda n, b, g=group, v=version, p=plural: self.custom.patch_namespaced_custom_object(
                    g, v, namespace, p, n, b, _content_type=MERGE)))
        for list_, patch in kinds:
            for _attempt in range(3):
                try:
                    resp = await list_()
                except ApiException as e:
                    if e.status == 404:
                        break  # the kind is not served here
                    raise
                try:
                    for obj in json.loads(await resp.read()).get("items") or []:
                        meta = obj["metadata"]
                        held = meta.get("finalizers") or []
                        keep = [f for f in held if not suite_finalizer(f)]
                        if keep != held:
                            await patch(meta["name"], {"metadata": {"finalizers": keep or None,
                                                                    "resourceVersion": meta["resourceVersion"]}})
                    break
                except ApiException as e:
                    if e.status not in (404, 409):  # gone or changed since listed: list again
                        raise

    async def force_delete_pods(self, namespace: str) -> None:
        """Delete every pod in ``namespace`` with grace period 0: a pod bound to a Node no kubelet serves leaves only
        so (module doc). A pod already Terminating is shortened to 0 as well."""
        pods = await self.core.list_namespaced_pod(namespace)
        for pod in pods.items:
            with contextlib.suppress(ApiException):
                await self.core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)

    @property
    def owned_namespaces(self) -> list[str]:
        """The namespaces this environment created (and deletes when it closes)."""
        return [*self._created_namespaces, self.namespace]

    async def _cleanup(self) -> None:
        """Force the test's pods out, run the deferred clean-ups (last first), release the suite's finalizers in
        the test's namespaces, then delete the namespaces. CRDs stay."""
        namespaces = self.owned_namespaces
        for ns in namespaces:
            with contextlib.suppress(ApiException):
                await self.force_delete_pods(ns)
        while self._deferred:
            with contextlib.suppress(Exception):
                await self._deferred.pop()()
        for ns in namespaces:
            with contextlib.suppress(ApiException):
                await self.release_finalizers(ns)
            with contextlib.suppress(ApiException):
                await self.core.delete_namespace(ns)


async def create_test_node(core: client.CoreV1Api, name: str, *, taint_key: str,
                           labels: dict[str, str] | None = None, allocatable: dict[str, str] | None = None) -> None:
    """Create a Node a test owns: labelled ``kubernetes.io/hostname`` with its name (and ``labels``), tainted
    ``taint_key:NoSchedule``, then — through the status subresource, as a kubelet would — Ready with ``allocatable``
    (8 CPU, 32Gi, 110 pods unless given), so that a scheduler binds pods that tolerate the taint to it."""
    resources = allocatable or {"cpu": "8", "memory": "32Gi", "pods": "110"}
    await core.create_node({"metadata": {"name": name, "labels": {HOSTNAME_LABEL: name, **(labels or {})}},
                            "spec": {"taints": [{"key": taint_key, "value": "", "effect": "NoSchedule"}]}})
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await core.patch_node_status(name, {"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "a test's node",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}}, _content_type=MERGE)


async def _seed_foreign(emulator: KubeEmulator) -> ForeignObjects:
    """Pre-create what every real Karmada has and the test does not own: ready member Clusters, a scheduled
    ResourceBinding in someone else's namespace, and a DataSource of another tether installation (holding its
    finalizer, referenced by no claim — exactly what a careless clean-up would take for its own)."""
    await emulator.register_crds("cluster.karmada.io_clusters", "work.karmada.io_resourcebindings",
                                 "datadependency.volcano.sh_datasources")
    foreign = ForeignObjects(clusters=[f"foreign-member-{i}" for i in (1, 2, 3)],
                             binding=("foreign-tenant", "web-deployment"), data_source="amoro-table-foreign.db.web")
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    for i, name in enumerate(foreign.clusters, 1):
        obj = await emulator.apply({
            "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "labels": {"tenant": "foreign"}},
            "spec": {"syncMode": "Push", "region": f"foreign-{i}"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                                       "message": "cluster is healthy and ready to accept workloads",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                       "apiEnablements": [{"groupVersion": "apps/v1",
                                           "resources": [{"name": "deployments", "kind": "Deployment"}]}],
                       "resourceSummary": {"allocatable": capacity}}})
        foreign.versions[f"Cluster/{name}"] = obj["metadata"]["resourceVersion"]
    ns, name = foreign.binding
    # No scheduler label: the emulator's Karmada stand-in leaves it as it is, so any write to it is someone else's.
    obj = await emulator.apply({
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": "web"},
                 "replicas": 1,
                 "placement": {"clusterAffinity": {"clusterNames": [foreign.clusters[0]]}},
                 "clusters": [{"name": foreign.clusters[0], "replicas": 1}]}})
    foreign.versions[f"ResourceBinding/{ns}/{name}"] = obj["metadata"]["resourceVersion"]
    obj = await emulator.apply({
        "apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSource",
        "metadata": {"name": foreign.data_source, "finalizers": [TETHER_FINALIZERS[1]]},
        "spec": {"system": "amoro", "type": "table", "name": "foreign.db.web", "reclaimPolicy": "Retain",
                 "locality": {"clusterNames": [foreign.clusters[0]]}}})
    foreign.versions[f"DataSource/{foreign.data_source}"] = obj["metadata"]["resourceVersion"]
    return foreign


def _foreign_changes(emulator: KubeEmulator, foreign: ForeignObjects) -> list[str]:
    """The foreign objects that were changed or deleted since they were seeded."""
    now: dict[str, str | None] = {}
    for name in foreign.clusters:
        obj = emulator.get("cluster.karmada.io/v1alpha1", "Cluster", name)
        now[f"Cluster/{name}"] = obj and obj["metadata"]["resourceVersion"]
    ns, name = foreign.binding
    obj = emulator.get("work.karmada.io/v1alpha2", "ResourceBinding", name, ns)
    now[f"ResourceBinding/{ns}/{name}"] = obj and obj["metadata"]["resourceVersion"]
    obj = emulator.get("datadependency.volcano.sh/v1alpha1", "DataSource", foreign.data_source)
    now[f"DataSource/{foreign.data_source}"] = obj and obj["metadata"]["resourceVersion"]
    return [f"{key} ({'deleted' if now[key] is None else 'modified'})"
            for key, rv in foreign.versions.items() if now[key] != rv]


@contextlib.asynccontextmanager
async def kube_environment(
    *,
    kubeconfig: str | None = None,
    namespace_prefix: str = "tether-test",
    emulator_options: dict[str, Any] | None = None,
    foreign_objects: bool = False,
    emulated: bool = False,
) -> AsyncIterator[KubeEnv]:
    """Yield a :class:`KubeEnv` on a fresh namespace (emulator unless a kubeconfig is given or in the env).
    ``foreign_objects``: seed the emulator with objects the test does not own (:func:`_seed_foreign`) and fail at
    the end if the test wrote to any of them; a real cluster has its own. ``emulated``: an emulator of its own
    whatever the environment says — for tests of the emulator's own machinery (its fault injection, its Karmada
    stand-in, its watch hub), which on a real cluster would have nothing to test."""
    kubeconfig = None if emulated else kubeconfig or os.environ.get(KUBECONFIG_ENV) or None
    emulator: KubeEmulator | None = None
    if kubeconfig:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        emulator = KubeEmulator(**(emulator_options or {}))
        await emulator.start()
        cfg = emulator.configuration()
    api = client.ApiClient(cfg)
    env = KubeEnv(api_client=api, configuration=cfg, namespace=f"{namespace_prefix}-{secrets.token_hex(4)}",
                  emulator=emulator)
    try:
        if emulator is not None and foreign_objects:
            env.foreign = await _seed_foreign(emulator)
        await env.core.create_namespace({"metadata": {"name": env.namespace}})
        yield env
        if emulator is not None and env.foreign is not None:
            touched = _foreign_changes(emulator, env.foreign)
            if touched:
                raise AssertionError(f"the test wrote to objects it does not own: {', '.join(touched)}")
    finally:
        try:
            await env._cleanup()  # on the emulator too, so that emulator runs exercise the clean-up
        finally:
            await api.close()
            if emulator is not None:
                await emulator.stop()
