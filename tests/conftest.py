"""Shared fixtures, and the hypothesis profiles.

``kube`` runs a test against the tether Kubernetes emulator, or against a real cluster when
``TETHER_TEST_KUBECONFIG`` is set (see ``tether.adapters.sandbox.kube_emulator.testing``).

**Hypothesis profiles** (``TETHER_HYPOTHESIS``, docs/testing.md). Property tests state their budget
(``max_examples``) and nothing about randomness; the profile decides:

* ``dev`` (the default): fresh examples on every run, and failing examples kept in ``.hypothesis/`` (ignored by
  git) and tried first on the next run, until the bug is fixed.
* ``ci``: the same, from one seed for the whole run, printed in the report header — ``TETHER_HYPOTHESIS_SEED=<seed>``
  (or ``--hypothesis-seed``) draws exactly the same examples again — and the reproduction blob printed with a
  failure. CI may keep ``.hypothesis/`` between runs (a cache) so that a failure found once is tried again.
* ``deterministic``: the same examples for ever (``derandomize``, no database) — to bisect, or to compare timings.

A fixed set of examples tested nothing new after its first run; drawing fresh ones within the same budget tests a
little more on every run, at the price of a failure that may show up on a run that changed nothing: the seed (and
the database) make it reproducible, and it is a real bug all the same.
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, core, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv, kube_environment

HYPOTHESIS_PROFILE_ENV = "TETHER_HYPOTHESIS"
HYPOTHESIS_SEED_ENV = "TETHER_HYPOTHESIS_SEED"
_EXAMPLES = DirectoryBasedExampleDatabase(os.path.join(os.path.dirname(os.path.dirname(__file__)), ".hypothesis",
                                                       "examples"))
# a property test states its own budget; these only say how examples are drawn (module doc)
settings.register_profile("dev", derandomize=False, database=_EXAMPLES, deadline=None)
settings.register_profile("ci", derandomize=False, database=_EXAMPLES, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
_profile = os.environ.get(HYPOTHESIS_PROFILE_ENV, "dev")
settings.load_profile(_profile)
_seed: int | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The ``ci`` profile draws from one seed per run (module doc); an explicit ``--hypothesis-seed`` wins."""
    global _seed
    if _profile == "ci" and config.getoption("hypothesis_seed", None) is None:
        _seed = int(os.environ.get(HYPOTHESIS_SEED_ENV) or random.randrange(2**32))
        core.global_force_seed = _seed


def pytest_report_header(config: pytest.Config) -> str:
    seed = f", seed {_seed} (repeat with {HYPOTHESIS_SEED_ENV}={_seed})" if _seed is not None else ""
    return f"tether hypothesis profile {_profile!r} ({HYPOTHESIS_PROFILE_ENV}){seed}"


@pytest.fixture
async def kube() -> AsyncIterator[KubeEnv]:
    """A kubernetes-asyncio client on a fresh namespace: ``kube.api_client``, ``kube.namespace``,
    ``kube.register_crds(...)``, ``kube.emulator`` (None on a real cluster)."""
    async with kube_environment() as env:
        yield env


@pytest.fixture
async def emulated_kube() -> AsyncIterator[KubeEnv]:
    """``kube`` on an emulator of its own, also when ``TETHER_TEST_KUBECONFIG`` names a real cluster: for tests of
    the emulator's own machinery (fault injection, the Karmada stand-in, the watch hub, the kubelet stand-in), which
    run on either run instead of skipping on the real one."""
    async with kube_environment(emulated=True) as env:
        yield env


@pytest.fixture
def emulator(kube: KubeEnv) -> KubeEmulator:
    """The emulator behind ``kube``; skips the test on a real cluster."""
    return kube.require_emulator()
