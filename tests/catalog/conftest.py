"""Fixtures for the catalog resolver tests: a sandbox catalog over real HTTP, fake time, plugin configs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tether.adapters.sandbox.catalog import SandboxCatalog
from tether.core.plugin_config import PluginConfig, parse_plugin


class FakeTime:
    """A clock that only moves when told to or when something sleeps; sleeps are recorded, not waited."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def options(self, *, random: float = 0.5) -> dict[str, Any]:
        return {"clock": self.clock, "sleep": self.sleep, "random": lambda: random}


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxCatalog]:
    async with SandboxCatalog() as cat:
        yield cat


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def make_plugin() -> Callable[..., PluginConfig]:
    """``make_plugin(url, system="amoro", auth={...}, retry={...}, **top_level_keys)`` in VG's ConfigMap shape."""

    def make(
        url: str,
        *,
        system: str = "amoro",
        auth: dict[str, Any] | None = None,
        tls: dict[str, Any] | None = None,
        retry: dict[str, Any] | None = None,
        **doc: Any,
    ) -> PluginConfig:
        endpoint: dict[str, Any] = {"url": url}
        if auth is not None:
            endpoint["auth"] = auth
        if tls is not None:
            endpoint["tls"] = tls
        body = {
            "system": system,
            "endpoint": endpoint,
            "retryConfig": {"maxRetries": 2, "initialBackoff": "1s", "maxBackoff": "10s", "timeout": "2s",
                            **(retry or {})},
            **doc,
        }
        return parse_plugin(system, json.dumps(body))

    return make
