"""The catalog registry: which resolver serves a system, and one live resolver per configured system.

Third-party resolvers are entry points of the group ``tether.catalogs``: a callable taking
``(plugin: PluginConfig, *, session=..., **options)`` and returning a
:class:`~tether.adapters.catalog.iceberg_rest.CatalogResolver`; :func:`load_resolver` picks one by
``plugin.type`` and :class:`ResolverSet` keeps one per configured system, rebuilding only the systems whose
configuration changed (so a ConfigMap edit keeps every other system's breaker, token and lookups in flight).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import aiohttp
import msgspec

from tether.adapters.catalog.iceberg_rest import (
    ENTRY_POINT_GROUP,
    AmoroResolver,
    CatalogResolver,
    IcebergRestResolver,
    Outcome,
    PathResolver,
    _failed,
)
from tether.core.identity import DataIdentity
from tether.core.locality import NO_PLUGIN_LOCALITY
from tether.core.plugin_config import EMPTY_PLUGINS, PATH_SYSTEMS, PluginConfig, PluginSet


class UnknownCatalogType(LookupError):
    """No built-in resolver and no ``tether.catalogs`` entry point serves a plugin's ``type``."""


_BUILTIN: dict[str, Callable[..., CatalogResolver]] = {
    "amoro": AmoroResolver,
    "iceberg-rest": IcebergRestResolver,
    **dict.fromkeys(PATH_SYSTEMS, PathResolver),
}


def load_resolver(
    plugin: PluginConfig, *, session: aiohttp.ClientSession | None = None, **options: Any
) -> CatalogResolver:
    """The resolver for ``plugin.type``: an entry point of ``tether.catalogs`` first, then the built-ins.

    Entry points come first so that a deployment can replace a built-in deliberately; the built-in table keeps
    tether working when its own package metadata is stale (an editable install made before the entry points).
    ``options`` (clock, sleep, random) are passed through only when given, so third-party factories that do not
    take them still load.
    """
    factory: Callable[..., Any] | None = None
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=plugin.type):
        factory = ep.load()
        break
    if factory is None:
        factory = _BUILTIN.get(plugin.type)
    if factory is None:
        known = sorted({*_BUILTIN, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})
        raise UnknownCatalogType(f"no catalog plugin of type {plugin.type!r} (known: {', '.join(known)})")
    resolver = factory(plugin, session=session, **options)
    if not isinstance(resolver, CatalogResolver):
        raise TypeError(f"catalog plugin {plugin.type!r} returned {type(resolver).__name__}, not a CatalogResolver")
    return resolver


def _catalog_part(plugin: PluginConfig) -> PluginConfig:
    """What of a plugin's configuration its resolver uses: all of it but its locality."""
    return msgspec.structs.replace(plugin, locality=NO_PLUGIN_LOCALITY, locality_error="")


class ResolverSet:
    """One resolver per configured system, rebuilt when that system's plugin config changes."""

    def __init__(
        self,
        plugins: PluginSet = EMPTY_PLUGINS,
        *,
        session: aiohttp.ClientSession | None = None,
        loader: Callable[..., CatalogResolver] = load_resolver,
        **options: Any,
    ) -> None:
        self._session = session
        self._loader = loader
        self._options = options
        self._resolvers: dict[str, CatalogResolver] = {}
        self._configs: dict[str, PluginConfig] = {}
        self._problems: dict[str, str] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._retired: list[CatalogResolver] = []
        self.update(plugins)

    @property
    def systems(self) -> frozenset[str]:
        return frozenset(self._resolvers)

    def resolver(self, system: str) -> CatalogResolver | None:
        return self._resolvers.get(system)

    def update(self, plugins: PluginSet) -> None:
        """Adopt a new plugin set: unchanged systems keep their resolver (and its breaker, token, flights)."""
        problems = {key: f"plugin config {key!r} is invalid: {err}" for key, err in plugins.errors.items()}
        for system in set(self._configs) - set(plugins.plugins):
            self._retire(system)
        for system, plugin in plugins.plugins.items():
            held = self._configs.get(system)
            if held is not None and system in self._resolvers and _catalog_part(held) == _catalog_part(plugin):
                continue  # (a locality change is the decider's business: the resolver stays)
            self._retire(system)
            self._configs[system] = plugin
            try:
                self._resolvers[system] = self._loader(plugin, session=self._session, **self._options)
            except Exception as exc:  # a broken third-party plugin spoils its own system only
                problems[system] = f"catalog plugin for system {system!r} could not be loaded: {exc}"
        self._problems = problems

    def _retire(self, system: str) -> None:
        self._configs.pop(system, None)
        old = self._resolvers.pop(system, None)
        if old is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(old.aclose())
        except RuntimeError:  # no loop yet: close it in aclose()
            self._retired.append(old)
            return
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def resolve(self, identity: DataIdentity, *, trigger: str = "lookup") -> Outcome:
        resolver = self._resolvers.get(identity.system)
        if resolver is None:
            problem = self._problems.get(identity.system) or f"no plugin configured for system {identity.system!r}"
            return _failed(identity, problem, retryable=False)
        try:
            return await resolver.resolve(identity, trigger=trigger)
        except Exception as exc:  # third-party resolvers may break the "never raises" rule; contain it
            return _failed(identity, f"catalog plugin for {identity.system!r} raised {exc!r}", retryable=True)

    async def aclose(self) -> None:
        for system in list(self._resolvers):
            self._retire(system)
        retired, self._retired = self._retired, []
        await asyncio.gather(*(r.aclose() for r in retired), *self._retiring, return_exceptions=True)
