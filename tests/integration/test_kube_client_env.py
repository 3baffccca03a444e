"""KubeClient looks up once what kubernetes-asyncio's session would look up on every request (proxy, netrc).

Without it, aiohttp asks the environment for a proxy and ``~/.netrc`` for credentials on every request, each in a
thread of the default executor. The answers are the same every time, so: when neither applies to the API server the
requests go without those thread round trips; when one applies, nothing changes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tether.adapters.kubernetes.client import CONFIGMAPS, KubeClient
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "no_proxy",
                   "NO_PROXY")


@pytest.fixture
def plain_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-such-netrc"))
    return monkeypatch


class ExecutorCalls:
    """Counts what the event loop runs in its default executor (threads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        loop = asyncio.get_running_loop()
        original = loop.run_in_executor

        def counting(executor: Any, func: Any, *args: Any) -> Any:
            self.count += 1
            return original(executor, func, *args)

        monkeypatch.setattr(loop, "run_in_executor", counting)


async def test_requests_skip_the_per_request_environment_lookups_when_none_applies(
    kube: KubeEnv, plain_environment: pytest.MonkeyPatch
) -> None:
    async with client.ApiClient(kube.configuration) as api:
        calls = ExecutorCalls(plain_environment)
        baseline = KubeClient.__new__(KubeClient)  # the same verbs, without the lookup done once
        baseline.api, baseline.request_timeout = api, 30.0
        await baseline.list(CONFIGMAPS, namespace=kube.namespace)
        assert calls.count > 0  # kubernetes-asyncio's session: threads on every request

        kube_client = KubeClient(api)
        calls.count = 0
        for _ in range(3):
            items, _rv = await kube_client.list(CONFIGMAPS, namespace=kube.namespace)
        assert calls.count == 0 and isinstance(items, list)


async def test_a_proxy_from_the_environment_is_still_honoured(
    kube: KubeEnv, plain_environment: pytest.MonkeyPatch
) -> None:
    plain_environment.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    plain_environment.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    async with client.ApiClient(kube.configuration) as api:
        KubeClient(api)
        assert api.rest_client.pool_manager.trust_env  # still asked per request, as before


async def test_netrc_credentials_for_the_server_are_still_honoured(
    kube: KubeEnv, plain_environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with client.ApiClient(kube.configuration) as api:
        from yarl import URL

        netrc = tmp_path / "netrc"
        netrc.write_text(f"machine {URL(kube.configuration.host).host} login someone password secret\n")
        netrc.chmod(0o600)
        plain_environment.setenv("NETRC", str(netrc))
        KubeClient(api)
        assert api.rest_client.pool_manager.trust_env
