"""A refused admission ConfigMap is said, not swallowed: the previous configuration stays in force, the daemon logs
the error with the ConfigMap's key, and ``tether_admission_config_valid`` is 0 until a valid one arrives."""

from __future__ import annotations

import asyncio

import pytest

from tether.adapters.kubernetes.client import CONFIGMAPS
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack
from tether.core.world.admission_state import DEFAULT_ADMISSION_CONFIG

pytestmark = pytest.mark.cluster

VALID = "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: priority\n  - name: gang\n"


def gauge(stack: Stack) -> float | None:
    assert stack.daemon is not None
    return stack.daemon.metrics.registry.get_sample_value("tether_admission_config_valid")


async def test_a_refused_admission_configmap_is_reported_and_the_previous_one_kept(kube: KubeEnv) -> None:
    options = {"admission": True, "admission_configmap": f"{kube.namespace}/tether-admission"}
    async with tether_stack(kube, daemon_options=options) as stack:
        daemon = stack.daemon
        assert daemon is not None
        configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "tether-admission", "namespace": kube.namespace},
                     "data": {"volcano-scheduler.conf": VALID}}
        await stack.kube.create(CONFIGMAPS, configmap, namespace=kube.namespace)

        async def accepted() -> bool:
            await asyncio.sleep(0)
            return gauge(stack) == 1.0 and daemon.world.admission.config != DEFAULT_ADMISSION_CONFIG

        await stack.eventually(accepted, what="the valid configuration in force")
        kept = daemon.world.admission.config

        await stack.kube.patch(CONFIGMAPS, "tether-admission",
                               {"data": {"volcano-scheduler.conf": "tiers: [[{name: priority}"}},
                               namespace=kube.namespace)

        async def refused() -> bool:
            await asyncio.sleep(0)
            return gauge(stack) == 0.0

        await stack.eventually(refused, what="the refused configuration reported")
        assert "tether-admission" in daemon.world.admission.config_error
        assert daemon.world.admission.config == kept  # nothing lost: the last good configuration stays

        await stack.kube.patch(CONFIGMAPS, "tether-admission", {"data": {"volcano-scheduler.conf": VALID}},
                               namespace=kube.namespace)
        await stack.eventually(accepted, what="the configuration accepted again")
        assert daemon.world.admission.config_error == ""
