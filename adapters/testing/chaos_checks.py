"""What a chaos run must end with, checked from recorded state: every version of every binding, the final objects.

:class:`History` watches the claims and the ResourceBindings of a namespace from a client of its own (not the
daemon's), resuming each watch from its last resourceVersion whenever the stream ends, and keeps **every version**
it is sent, with its resourceVersion. The API server's resourceVersion is one global counter (etcd's revision, the
emulator's), so the two streams merge into the one order in which the versions were committed, and "the claim was
Bound when this binding version was written" is exact: the claim's last version before it says so.

:func:`unconstrained_versions` is the invariant the binding webhook and the decider together promise: **no binding
version whose ``spec.clusters`` is set lacks tether's exclusions while its workload has a Bound claim**. (Before
the claim is Bound there is nothing to constrain it with; the webhook holds a binding whose claim is still
resolving, tests/integration/test_admission_e2e.py.) A watch that answers 410 Gone would leave a hole in the
history, so it is recorded (``gaps``) and the run reports it rather than pretending to have seen everything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, DATASOURCES, KubeClient, KubeError, Resource


@dataclass(frozen=True, slots=True)
class Version:
    rv: int
    kind: str  # "claim" | "binding"
    name: str
    deleted: bool
    workload: str  # a claim's workload name; a binding's resource name
    phase: str  # a claim's phase
    clusters: tuple[str, ...]  # a binding's spec.clusters
    excluded: frozenset[str]  # a binding's clusterAffinity.exclude


def version_of(kind: str, event_type: str, obj: Mapping[str, Any]) -> Version | None:
    meta = obj.get("metadata") or {}
    try:
        rv = int(meta.get("resourceVersion") or 0)
    except ValueError:
        return None
    spec = obj.get("spec") or {}
    if kind == "claim":
        return Version(rv, kind, str(meta.get("name")), event_type == "DELETED",
                       str((spec.get("workload") or {}).get("name") or ""),
                       str((obj.get("status") or {}).get("phase") or ""), (), frozenset())
    affinity = (spec.get("placement") or {}).get("clusterAffinity") or {}
    return Version(rv, kind, str(meta.get("name")), event_type == "DELETED",
                   str((spec.get("resource") or {}).get("name") or ""), "",
                   tuple(str(c.get("name")) for c in spec.get("clusters") or []),
                   frozenset(str(c) for c in affinity.get("exclude") or []))


@dataclass
class History:
    """Every version of a namespace's claims and bindings (module doc). ``start()`` after creating the namespace,
    ``caught_up(rv)`` to wait until both streams reached a version, ``stop()`` at the end."""

    kube: KubeClient
    namespace: str
    versions: list[Version] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    seen_rv: dict[str, int] = field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        for kind, res in (("claim", CLAIMS), ("binding", BINDINGS)):
            items, rv = await self.kube.list(res, namespace=self.namespace)
            for item in items:
                v = version_of(kind, "ADDED", item)
                if v is not None:
                    self.versions.append(v)
            self.seen_rv[kind] = int(rv or 0)
            self._tasks.append(asyncio.create_task(self._follow(kind, res, rv)))

    async def _follow(self, kind: str, res: Resource, rv: str) -> None:
        while True:
            try:
                async for event in self.kube.watch(res, resource_version=rv, namespace=self.namespace,
                                                   timeout_seconds=60):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise KubeError(int(obj.get("code") or 500), str(obj.get("reason")), str(obj.get("message")))
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if event.get("type") != "BOOKMARK":
                        v = version_of(kind, str(event.get("type")), obj)
                        if v is not None:
                            self.versions.append(v)
                    if new_rv:
                        rv = str(new_rv)
                        self.seen_rv[kind] = int(new_rv)
            except asyncio.CancelledError:
                raise
            except KubeError as exc:
                if exc.status == 410:  # a hole: versions were committed that this history never saw
                    self.gaps.append(f"{kind}: 410 Gone after resourceVersion {rv}")
                    _, rv = await self.kube.list(res, namespace=self.namespace)
                await asyncio.sleep(0.2)
            except Exception:  # the API server went away for a moment: resume from the last version
                await asyncio.sleep(0.2)

    async def caught_up(self, rv: int, *, within: float = 60.0) -> None:
        """Until both streams have reached ``rv`` (a bookmark or a later write)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while min(self.seen_rv.values(), default=0) < rv:
            if loop.time() > deadline:
                raise TimeoutError(f"the history did not reach resourceVersion {rv}: {self.seen_rv}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def unconstrained_versions(versions: Iterable[Version], expected: Mapping[str, frozenset[str]]
                           ) -> list[dict[str, Any]]:
    """The binding versions with ``spec.clusters`` set whose workload had a Bound claim (its last version before,
    in resourceVersion order) and that lack the exclusions ``expected[workload]`` (the clusters without the data)."""
    bound: dict[str, str] = {}  # Bound claim → its workload
    bound_claims: Counter[str] = Counter()  # workload → how many of its claims are Bound
    out: list[dict[str, Any]] = []
    for v in sorted(versions, key=lambda v: v.rv):
        if v.kind == "claim":
            was = bound.pop(v.name, None)
            if was is not None:
                bound_claims[was] -= 1
            if v.phase == "Bound" and not v.deleted:
                bound[v.name] = v.workload
                bound_claims[v.workload] += 1
            continue
        if v.deleted or not v.clusters or bound_claims[v.workload] <= 0:
            continue
        workload = v.workload
        missing = expected.get(workload, frozenset()) - v.excluded
        if missing:
            out.append({"binding": v.name, "rv": v.rv, "clusters": list(v.clusters), "missing": sorted(missing)})
    return out


async def duplicate_data_sources(kube: KubeClient, tables: Iterable[str]) -> dict[str, int]:
    """Tables with more than one DataSource (a DataSource is cluster-scoped, one per data identity)."""
    wanted = set(tables)
    sources, _ = await kube.list(DATASOURCES)
    counts = Counter(str((s.get("spec") or {}).get("name")) for s in sources)
    return {t: n for t, n in counts.items() if t in wanted and n > 1}
