"""Every ``spec.clusters`` each ResourceBinding of a namespace had, from a watch: what a test asserts "never
anywhere else" against (Karmada may place a binding and move it again between two reads)."""

from __future__ import annotations

import asyncio
import contextlib

from tether.adapters.kubernetes.client import BINDINGS, KubeClient


class BindingHistory:
    """``clusters[name]``: each ``spec.clusters`` seen of the binding ``name``, in order (``start`` … ``stop``)."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.clusters: dict[str, list[list[str]]] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        _, version = await self.kube.list(BINDINGS, namespace=self.namespace)
        self.task = asyncio.create_task(self._run(version))

    async def _run(self, version: str) -> None:
        async for event in self.kube.watch(BINDINGS, resource_version=version, namespace=self.namespace):
            obj = event.get("object") or {}
            name = (obj.get("metadata") or {}).get("name")
            if name:
                names = [c["name"] for c in (obj.get("spec") or {}).get("clusters") or []]
                self.clusters.setdefault(name, []).append(names)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
