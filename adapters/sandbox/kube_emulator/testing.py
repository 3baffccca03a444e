"""Test fixtures that run the same test against the emulator or a real cluster.

``kube_environment()`` yields a :class:`KubeEnv`: a kubernetes-asyncio ``ApiClient``, a fresh namespace (random
suffix) and ``register_crds()``. Without ``TETHER_TEST_KUBECONFIG`` it starts a private :class:`KubeEmulator` on
loopback (milliseconds); with it, it talks to that cluster, creates the namespace there, registers CRDs through the
API (waiting for ``Established``) and deletes what it created on exit — CRDs that already existed are left alone.

Tests that need emulator-only features call ``env.require_emulator()`` which skips with a clear reason on a real
cluster. The pytest fixtures ``kube`` / ``emulator`` in ``tests/conftest.py`` are thin wrappers around this.

    async def test_something(kube):
        await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
        core = kubernetes_asyncio.client.CoreV1Api(kube.api_client)
        await core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "x"}})
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from . import KubeEmulator
from .crds import clean_for_create, load_crd_documents

KUBECONFIG_ENV = "TETHER_TEST_KUBECONFIG"


@dataclass
class KubeEnv:
    api_client: client.ApiClient
    configuration: client.Configuration
    namespace: str
    emulator: KubeEmulator | None
    _created_crds: list[str] = field(default_factory=list)
    _created_namespaces: list[str] = field(default_factory=list)

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
            import pytest

            pytest.skip(f"{why}; TETHER_TEST_KUBECONFIG points at a real cluster")
        return self.emulator

    async def create_namespace(self, prefix: str = "tether-test") -> str:
        """Another fresh namespace, deleted on exit."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        await self.core.create_namespace({"metadata": {"name": name}})
        self._created_namespaces.append(name)
        return name

    async def register_crds(self, *refs: str | Path, wait_seconds: float = 30.0) -> list[str]:
        """Register CRDs (files, directories or names under ``tether/crds``) via the API; wait for Established."""
        ext = client.ApiextensionsV1Api(self.api_client)
        names = []
        for doc in load_crd_documents(*refs):
            body = clean_for_create(doc)
            name = body["metadata"]["name"]
            try:
                await ext.create_custom_resource_definition(body)
                self._created_crds.append(name)
            except ApiException as e:
                if e.status != 409:
                    raise
            names.append(name)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        for name in names:
            while True:
                resp = await ext.read_custom_resource_definition(name, _preload_content=False)
                crd = json.loads(await resp.read())
                conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    break
                if loop.time() > deadline:
                    raise TimeoutError(f"CRD {name} not Established after {wait_seconds}s")
                await asyncio.sleep(0.2)
        return names

    async def _cleanup(self) -> None:
        ext = client.ApiextensionsV1Api(self.api_client)
        for ns in [*self._created_namespaces, self.namespace]:
            with contextlib.suppress(ApiException):
                await self.core.delete_namespace(ns)
        for name in self._created_crds:
            with contextlib.suppress(ApiException):
                await ext.delete_custom_resource_definition(name)


@contextlib.asynccontextmanager
async def kube_environment(
    *,
    kubeconfig: str | None = None,
    namespace_prefix: str = "tether-test",
    emulator_options: dict[str, Any] | None = None,
) -> AsyncIterator[KubeEnv]:
    """Yield a :class:`KubeEnv` on a fresh namespace (emulator unless a kubeconfig is given or in the env)."""
    kubeconfig = kubeconfig or os.environ.get(KUBECONFIG_ENV) or None
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
        await env.core.create_namespace({"metadata": {"name": env.namespace}})
        yield env
    finally:
        try:
            if emulator is None:
                await env._cleanup()
        finally:
            await api.close()
            if emulator is not None:
                await emulator.stop()
