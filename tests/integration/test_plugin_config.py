"""A broken entry of the plugin ConfigMap is visible to monitoring, not only on the claims (issue 38 item 3).

``kubectl patch cm … -p '{"data":{"amoro":"{not json"}}'`` used to show only as ``PluginConfigInvalid`` on the
system's claims: no gauge, no alert, an info line at most, nothing in ``tether status``. Now, on a running daemon:
``tether_plugin_config_valid{system="amoro"}`` goes 0 (and back to 1 when fixed), one warning carries the system and
the parse error, and ``GET /status`` — so ``tether status`` — names the refused system with its error.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rich.console import Console

from tether.adapters.cli.status import render_status
from tether.adapters.kubernetes.client import CONFIGMAPS
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack

from .test_decision_log import captured_info

pytestmark = pytest.mark.cluster

PARSE_ERROR = "not valid JSON: Expecting property name enclosed in double quotes"


def gauge(stack: Stack, system: str) -> float | None:
    assert stack.daemon is not None
    return stack.daemon.metrics.registry.get_sample_value("tether_plugin_config_valid", {"system": system})


async def gauge_is(stack: Stack, system: str, value: float) -> None:
    async def probe() -> bool:
        await asyncio.sleep(0)
        return gauge(stack, system) == value

    await stack.eventually(probe, what=f"tether_plugin_config_valid{{system={system!r}}} == {value}")


def screen(document: dict[str, Any]) -> str:
    console = Console(record=True, width=400, force_terminal=False)
    console.print(render_status(document, url="http://tether"))
    return console.export_text()


async def test_a_broken_plugin_entry_is_a_gauge_a_warning_and_a_status_error(kube: KubeEnv) -> None:
    with captured_info() as lines:
        async with tether_stack(kube) as stack:
            daemon = stack.daemon
            assert daemon is not None
            name = stack.plugin_configmap.partition("/")[2]
            await gauge_is(stack, "amoro", 1.0)
            document = await daemon.status()
            assert document["plugins"] == {"configmap": stack.plugin_configmap, "systems": ["amoro"], "refused": {}}
            good = (await stack.kube.get(CONFIGMAPS, name, namespace=stack.namespace))["data"]["amoro"]

            await stack.kube.patch(CONFIGMAPS, name, {"data": {"amoro": "{not json"}}, namespace=stack.namespace)
            await gauge_is(stack, "amoro", 0.0)
            refusals = [line for line in lines if line["event"].startswith("plugin configuration refused")]
            assert len(refusals) == 1 and refusals[0]["log_level"] == "warning", refusals
            assert refusals[0]["system"] == "amoro" and PARSE_ERROR in refusals[0]["error"]
            assert refusals[0]["configmap"] == stack.plugin_configmap
            document = await daemon.status()
            assert document["plugins"]["systems"] == []
            assert PARSE_ERROR in document["plugins"]["refused"]["amoro"]
            shown = screen(document)
            assert "PluginConfigInvalid" in shown and "plugin amoro" in shown and "not valid JSON" in shown

            await stack.kube.patch(CONFIGMAPS, name, {"data": {"amoro": good}}, namespace=stack.namespace)
            await gauge_is(stack, "amoro", 1.0)
            assert (await daemon.status())["plugins"]["refused"] == {}
            assert [line for line in lines if line["event"] == "plugin configuration accepted"]
            assert len([line for line in lines if line["event"].startswith("plugin configuration refused")]) == 1
