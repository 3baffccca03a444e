"""Shared fixtures. ``kube`` runs a test against the tether Kubernetes emulator, or against a real cluster when
``TETHER_TEST_KUBECONFIG`` is set (see ``tether.adapters.sandbox.kube_emulator.testing``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv, kube_environment


@pytest.fixture
async def kube() -> AsyncIterator[KubeEnv]:
    """A kubernetes-asyncio client on a fresh namespace: ``kube.api_client``, ``kube.namespace``,
    ``kube.register_crds(...)``, ``kube.emulator`` (None on a real cluster)."""
    async with kube_environment() as env:
        yield env


@pytest.fixture
def emulator(kube: KubeEnv) -> KubeEmulator:
    """The emulator behind ``kube``; skips the test on a real cluster."""
    return kube.require_emulator()
