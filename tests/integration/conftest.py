"""Fixtures of the integration suite.

``kube`` is overridden here to start the emulator with a bookmark every 60 s — about what a real apiserver does —
instead of its 1 s default: with the default, a watch handler that falls behind under load (the 50-claims test, the
bench) spins in the emulator's bookmark wait (``wait_for(queue.get(), 0)`` never succeeds while events are queued
and a bookmark is due), burning the CPU the daemon needs and holding the emulator's shutdown for 60 s. Reported to
the emulator's owner; the override is harmless on a real cluster (the options only apply to the emulator).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether.adapters.sandbox.kube_emulator.testing import KubeEnv, kube_environment

EMULATOR_OPTIONS = {"bookmark_interval": 60.0}


@pytest.fixture
async def kube() -> AsyncIterator[KubeEnv]:
    async with kube_environment(emulator_options=EMULATOR_OPTIONS) as env:
        yield env


@pytest.fixture
async def karmada_kube() -> AsyncIterator[KubeEnv]:
    """``kube`` with the emulator's Karmada scheduler stand-in running (skips on a real cluster: no Karmada)."""
    async with kube_environment(emulator_options={**EMULATOR_OPTIONS, "karmada_scheduler": True}) as env:
        env.require_emulator("needs the emulator's Karmada scheduler stand-in")
        yield env
