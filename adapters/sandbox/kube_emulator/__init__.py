"""A faithful, in-process emulator of the Kubernetes API for tether's tests and sandbox demo.

No kube-apiserver can be installed where tether is developed, yet its adapters must be tested over real HTTP with
kubernetes-asyncio. :class:`KubeEmulator` serves the subset of the API tether uses — discovery, core kinds, apps
Deployments, CRDs (registered by POSTing ``CustomResourceDefinition`` objects, as on a real cluster), admission
webhook configurations — with the semantics that matter for a controller: one global resourceVersion, optimistic
concurrency, generation, the status subresource, finalizers, no-op writes, schema pruning/defaulting/validation,
watches with bookmarks, resumption and 410 Gone, and admission webhooks called over HTTPS.

It is a test tool, not part of tether's runtime path. The rule it lives by: a test that passes here and fails on a
real cluster is a bug here. The conformance suite in ``tests/emulator`` runs unchanged against a real cluster when
``TETHER_TEST_KUBECONFIG`` is set, which is how that rule is checked.

Optional components, all off by default: a minimal pod binder (``binder=True``) and a Karmada scheduler stand-in
(``karmada_scheduler=True``) for ResourceBindings, and the cost of an etcd-backed write (``write_cost=``, a
group-commit service time, :mod:`.write_cost`) for benchmarks. Faults are injected through
:attr:`KubeEmulator.faults`.

Usage::

    async with KubeEmulator(crds=["ops/crds"], karmada_scheduler=True) as emu:
        async with kubernetes_asyncio.client.ApiClient(emu.configuration()) as api:
            ...
"""

from __future__ import annotations

import collections
import copy
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from . import strategies
from .binder import Binder, bind_pod
from .crds import clean_for_create, load_crd_documents
from .errors import ApiError
from .faults import Faults
from .resources import ResourceType
from .server import Server
from .store import Store
from .webhook_admission import WebhookAdmission
from .write_cost import CALIBRATED, GroupCommit, WriteCost

__all__ = ["CALIBRATED", "ApiError", "GroupCommit", "KubeEmulator", "WriteCost", "load_crd_documents"]


#: The namespaces a real API server starts with.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class KubeEmulator:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        crds: Iterable[str | Path] = (),
        history_size: int = 10_000,
        bookmark_interval: float = 1.0,
        binder: bool = False,
        karmada_scheduler: bool = False,
        karmada_options: dict[str, Any] | None = None,
        webhook_services: dict[str, str] | None = None,
        webhook_ca: str | bytes | None = None,
        commit_times: bool = False,
        write_cost: WriteCost | None = None,
    ) -> None:
        """``webhook_services`` maps ``"<namespace>/<name>[:<port>]"`` of a webhook ``clientConfig.service`` to the
        ``host:port`` where that webhook actually listens (there is no cluster DNS here). ``webhook_ca`` adds a
        trusted CA (PEM) for webhook calls besides each webhook's own ``caBundle``. With ``commit_times`` the
        store remembers when (``time.monotonic()``) it committed each of the last ``history_size``
        resourceVersions, served at ``GET /_emulator/commit-times`` (a server-side clock for benchmarks).
        ``write_cost`` makes every write wait for an etcd-like group commit of that cost (:mod:`.write_cost`;
        off by default). Whether or not it is on, :attr:`api_writes` counts the write requests served, by
        ``(verb, resource[/subresource], namespace)``, also at ``GET /_emulator/writes``."""
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.store = Store(history_size=history_size)
        strategies.install(self.store)
        self.faults = Faults(hub=self.store.hub, compact=self._compact)
        self.admission = WebhookAdmission(services=webhook_services or {}, extra_ca=webhook_ca)
        self.store.admission = self.admission
        self.commit_times: dict[int, float] | None = None
        self.group_commit = GroupCommit(write_cost) if write_cost is not None else None
        self.api_writes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        #: apiserver_request_total, as a real server keeps it (metrics.py; GET /metrics)
        self.requests_total: collections.Counter[tuple[str, ...]] = collections.Counter()
        if commit_times:
            times: dict[int, float] = {}
            self.commit_times = times
            clock, keep = time.monotonic, max(1, history_size)

            def remember(ev: Any) -> None:
                times[ev.rv] = clock()
                if len(times) > keep:
                    del times[next(iter(times))]

            self.store.listeners.append(remember)
        self._crd_refs = list(crds)
        self._binder_enabled = binder
        self._karmada_enabled = karmada_scheduler
        self._karmada_options = karmada_options or {}
        self.binder: Binder | None = None
        self.karmada_scheduler: Any = None
        self._runner: web.AppRunner | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def _compact(self) -> int:
        """Move the resourceVersion past every version a client holds (``Faults.expire_watches``); the new one."""
        self.store.rv += 1
        return self.store.rv

    # -- lifecycle ----------------------------------------------------------------------------------------------
    async def start(self) -> KubeEmulator:
        if self._crd_refs:
            await self.register_crds(*self._crd_refs)
        self._runner = web.AppRunner(Server(self).app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        if self._binder_enabled:
            self.enable_binder()
        if self._karmada_enabled:
            await self.enable_karmada_scheduler(**self._karmada_options)
        return self

    async def stop(self) -> None:
        if self.karmada_scheduler is not None:
            await self.karmada_scheduler.stop()
            self.karmada_scheduler = None
        if self.binder is not None:
            await self.binder.stop()
            self.binder = None
        self.store.hub.drop()
        if self.group_commit is not None:
            await self.group_commit.close()
        for task in list(self.store.background):
            task.cancel()
        await self.admission.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def __aenter__(self) -> KubeEmulator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def add_system_namespaces(self) -> None:
        """Create the namespaces a real API server starts with (:data:`SYSTEM_NAMESPACES`): ``default`` is every
        kubeconfig's namespace unless it names another, so ``kubectl create`` needs it. Not done by default: tests
        in process create what they need, and assert on what they create."""
        for name in SYSTEM_NAMESPACES:
            await self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # -- optional components ------------------------------------------------------------------------------------
    def enable_binder(self) -> Binder:
        if self.binder is None:
            self.binder = Binder(self.store)
            self.binder.start()
        return self.binder

    async def enable_karmada_scheduler(self, **options: Any) -> Any:
        """Start the Karmada scheduler stand-in (registers the Karmada CRDs it needs if missing)."""
        from .karmada_scheduler import KarmadaScheduler

        if self.karmada_scheduler is None:
            needed = [n for n in ("clusters.cluster.karmada.io", "resourcebindings.work.karmada.io",
                                  "clusterresourcebindings.work.karmada.io")
                      if self.store.get_obj(("apiextensions.k8s.io", "customresourcedefinitions"), "", n) is None]
            if needed:
                await self.register_crds(*[f"{n.split('.', 1)[1]}_{n.split('.')[0]}" for n in needed])
            self.karmada_scheduler = KarmadaScheduler(self.store, **options)
            self.karmada_scheduler.start()
        return self.karmada_scheduler

    async def bind_pod(self, *, namespace: str, name: str, node: str) -> dict[str, Any]:
        return await bind_pod(self.store, namespace=namespace, name=name, node=node)

    # -- client configuration -----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def configuration(self) -> Any:
        """A ready ``kubernetes_asyncio.client.Configuration`` pointing at this emulator."""
        from kubernetes_asyncio.client import Configuration

        cfg = Configuration(host=self.url)
        cfg.verify_ssl = False
        return cfg

    def kubeconfig_path(self, directory: str | Path | None = None) -> Path:
        """Write a kubeconfig for this emulator (context ``tether-emulator``) and return its path."""
        if directory is None:
            if self._tmp is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="tether-kube-")
            directory = self._tmp.name
        path = Path(directory) / "kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)  # (``--kubeconfig-dir`` names a directory to use, new or not)
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "tether-emulator",
            "clusters": [{"name": "tether-emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "tether", "user": {"token": "tether-emulator"}}],
            "contexts": [{"name": "tether-emulator",
                          "context": {"cluster": "tether-emulator", "user": "tether", "namespace": "default"}}],
        }
        path.write_text(yaml.safe_dump(doc))
        return path

    # -- in-process API (tests, demo seeding) -------------------------------------------------------------------
    def resource(self, api_version: str, kind_or_plural: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        for rt in self.store.by_gv.get((group, version), {}).values():
            if kind_or_plural in (rt.kind, rt.plural):
                return rt
        raise KeyError(f"no resource {kind_or_plural!r} in {api_version!r}")

    async def register_crds(self, *refs: str | Path) -> list[str]:
        """Create (or update) CRDs in-process from files, directories or names under ``tether/crds``."""
        names = []
        rt = self.store.type_for("apiextensions.k8s.io", "customresourcedefinitions")
        for doc in load_crd_documents(*refs):
            doc = clean_for_create(doc)
            name = doc["metadata"]["name"]
            existing = self.store.get_obj(rt.key, "", name)
            if existing is None:
                await self.store.create(rt, doc)
            else:
                doc["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                await self.store.update(rt, name, doc)
            names.append(name)
        return names

    async def apply(self, manifest: dict[str, Any], *, with_status: bool = True) -> dict[str, Any]:
        """Create-or-replace ``manifest`` in-process, then write its ``status`` through the status subresource
        (so a Karmada Cluster can be seeded ready with capacity). Returns the stored object (a copy)."""
        rt = self.resource(manifest["apiVersion"], manifest["kind"])
        body = copy.deepcopy(manifest)
        status = body.pop("status", None)
        meta = body.setdefault("metadata", {})
        ns = meta.get("namespace", "default") if rt.namespaced else ""
        if rt.namespaced:
            meta["namespace"] = ns
            if self.store.get_obj(("", "namespaces"), "", ns) is None:
                await self.store.create(self.store.type_for("", "namespaces"), {"metadata": {"name": ns}})
        existing = self.store.get_obj(rt.key, ns, meta.get("name", ""))
        if existing is None:
            obj = await self.store.create(rt, body, namespace=ns)
        else:
            meta["resourceVersion"] = existing["metadata"]["resourceVersion"]
            obj = await self.store.update(rt, meta["name"], body, namespace=ns)
        if status is not None and with_status and rt.status_subresource:
            obj = await self.store.update(rt, obj["metadata"]["name"], {**obj, "status": status}, namespace=ns,
                                          subresource="status")
        return copy.deepcopy(obj)

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        rt = self.resource(api_version, kind)
        obj = self.store.get_obj(rt.key, namespace if rt.namespaced else "", name)
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        rt = self.resource(api_version, kind)
        return [copy.deepcopy(o) for o in self.store.iter_objects(rt.key, namespace)]
