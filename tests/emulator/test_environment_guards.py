"""The test environment's guards for what a real cluster may lack: a karmada-scheduler watching it, and an API
server that can call a webhook served on this machine's loopback (``KubeEnv`` in
``adapters/sandbox/kube_emulator/testing.py``). Decided from the environment and the kubeconfig's server alone."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from tether.adapters.sandbox.kube_emulator.testing import KARMADA_SCHEDULER_ENV, WEBHOOK_LOOPBACK_ENV, KubeEnv


def real(host: str) -> KubeEnv:
    """A KubeEnv as on a real cluster (no emulator) whose API server is ``host``; it makes no request."""
    cfg = client.Configuration()
    cfg.host = host
    return KubeEnv(api_client=None, configuration=cfg, namespace="ns", emulator=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("host", "declared", "reachable"), [
    ("https://127.0.0.1:6443", None, True),  # an API server on this machine
    ("https://localhost:6443", None, True),
    ("https://[::1]:6443", None, True),
    ("https://10.0.0.5:6443", None, False),  # elsewhere: its loopback is not ours
    ("https://api.example.invalid", None, False),
    ("https://10.0.0.5:6443", "1", True),  # declared reachable (a tunnel)
    ("https://127.0.0.1:6443", "0", False),  # declared unreachable (an API server in a container)
])
def test_loopback_webhooks_are_assumed_only_for_an_api_server_on_loopback(
        monkeypatch: pytest.MonkeyPatch, host: str, declared: str | None, reachable: bool) -> None:
    if declared is None:
        monkeypatch.delenv(WEBHOOK_LOOPBACK_ENV, raising=False)
    else:
        monkeypatch.setenv(WEBHOOK_LOOPBACK_ENV, declared)
    env = real(host)
    assert env.loopback_webhooks() is reachable
    if reachable:
        env.require_loopback_webhooks()
    else:
        with pytest.raises(pytest.skip.Exception, match=WEBHOOK_LOOPBACK_ENV):
            env.require_loopback_webhooks()


@pytest.mark.parametrize(("declared", "runs"), [(None, True), ("1", True), ("0", False), ("false", False)])
def test_a_real_karmada_scheduler_is_assumed_unless_declared_absent(
        monkeypatch: pytest.MonkeyPatch, declared: str | None, runs: bool) -> None:
    if declared is None:
        monkeypatch.delenv(KARMADA_SCHEDULER_ENV, raising=False)
    else:
        monkeypatch.setenv(KARMADA_SCHEDULER_ENV, declared)
    if runs:
        real("https://10.0.0.5:6443").require_karmada_scheduler()
    else:
        with pytest.raises(pytest.skip.Exception, match=KARMADA_SCHEDULER_ENV):
            real("https://10.0.0.5:6443").require_karmada_scheduler()
