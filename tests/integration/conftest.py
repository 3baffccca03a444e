"""Fixtures of the integration suite.

``kube`` is overridden here to start the emulator with a bookmark every 60 s — about what a real apiserver does —
instead of its 1 s default: with the default, a watch handler that falls behind under load (the 50-claims test, the
bench) spins in the emulator's bookmark wait (``wait_for(queue.get(), 0)`` never succeeds while events are queued
and a bookmark is due), burning the CPU the daemon needs and holding the emulator's shutdown for 60 s. Reported to
the emulator's owner; the override is harmless on a real cluster (the options only apply to the emulator).

Both fixtures seed the emulator with **foreign objects** (``foreign_objects=True``): ready Karmada Clusters, a
ResourceBinding in another namespace and another installation's DataSource, none of them the test's. Every real
Karmada has Clusters a test did not create, so an assertion that presumes it owns them all fails here too, and a
test (or clean-up) that writes to a foreign object fails at its end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import tether.core.decision as decision
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv, kube_environment

EMULATOR_OPTIONS = {"bookmark_interval": 60.0}


@pytest.fixture
async def kube() -> AsyncIterator[KubeEnv]:
    async with kube_environment(emulator_options=EMULATOR_OPTIONS, foreign_objects=True) as env:
        yield env


@pytest.fixture
async def karmada_kube() -> AsyncIterator[KubeEnv]:
    """``kube`` with a Karmada scheduler: the emulator's stand-in, or on a real cluster the karmada-scheduler that
    watches it (skips there with ``TETHER_TEST_KARMADA_SCHEDULER=0``). A real scheduler also considers Clusters the
    test does not own, so the tests' bindings name their own clusters (``clusterAffinity.clusterNames``)."""
    async with kube_environment(emulator_options={**EMULATOR_OPTIONS, "karmada_scheduler": True},
                                foreign_objects=True) as env:
        env.require_karmada_scheduler()
        yield env


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries of failed commands and lookups back off from 100 ms up to 1 s instead of 5 s up to 5 min (the decider
    reads the constants at every call of ``backoff_ms``, in-process)."""
    monkeypatch.setattr(decision, "RETRY_BASE_MS", 100)
    monkeypatch.setattr(decision, "RETRY_MAX_MS", 1_000)
