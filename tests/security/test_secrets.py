"""Secrets never leave where they came from: a daemon run with a push token and member credentials, with errors,
then every output of it searched for them.

The run: the push endpoint over HTTPS with a token; a catalog that wants a bearer token, which the plugin ConfigMap
names by file (``tokenFile``: a mounted Secret); a member joined by a kubeconfig holding a bearer token; three
Karmada Clusters whose ``secretRef`` Secrets hold a token for an endpoint that refuses connections, a token that is
not text, and no token at all; pushes with no, a wrong and the right token; a claim bound and one whose table does
not exist (an Event). Then the outputs — every log line (structlog as ``tether run`` renders it, at debug, and the
standard library's loggers), ``/metrics``, ``/status``, every Kubernetes Event, and every byte of the SQLite log
(its file and write-ahead log) — must contain none of the secrets, in clear or base64-encoded. Each output is
first shown to hold what the run did (so an empty capture cannot pass), and the search to find a secret where
one is (the member's kubeconfig).

The member is an emulator reached with a token the test makes up — the control plane's own on the emulator, a
private one beside a real control plane (``KubeEnv.member_endpoint``), where everything else runs for real.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import logging
import secrets
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
import yaml

from tether.adapters.cli.run import configure_logging
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLUSTERS, CONFIGMAPS, EVENTS, KubeClient
from tether.adapters.kubernetes.members import SECRETS
from tether.adapters.kubernetes.webhook_certs import ensure_self_signed
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.member import CRDS as MEMBER_CRDS
from tether.adapters.testing.tether_stack import CRDS, Stack, eventually, tether_stack

PUSH_TOKEN = f"push-{secrets.token_hex(16)}"
MEMBER_TOKEN = f"member-{secrets.token_hex(16)}"
CLUSTER_TOKEN = f"cluster-{secrets.token_hex(16)}"
CATALOG_TOKEN = f"catalog-{secrets.token_hex(16)}"
SECRETS_OF_THE_RUN = (PUSH_TOKEN, MEMBER_TOKEN, CLUSTER_TOKEN, CATALOG_TOKEN)


def forms(secret: str) -> list[bytes]:
    """How a secret could appear: in clear, base64-encoded (as in a Secret's data), and its tail (a prefix cut)."""
    return [secret.encode(), base64.b64encode(secret.encode()), secret[-16:].encode()]


def leaks(output: bytes | str) -> list[str]:
    data = output.encode() if isinstance(output, str) else output
    return [secret for secret in SECRETS_OF_THE_RUN if any(form in data for form in forms(secret))]


@contextlib.contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Every log line of the run, rendered as ``tether run --log-level debug`` renders it, and the standard
    library's loggers (aiohttp, kubernetes-asyncio, the SQLite log) at DEBUG, into one buffer."""
    buffer = io.StringIO()
    saved = structlog.get_config()
    with contextlib.redirect_stderr(buffer):  # (configure_logging binds the stream it finds now)
        configure_logging("debug", json_logs=True)
    handler = logging.StreamHandler(buffer)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        structlog.configure(**saved)


def member_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "m1",
        "clusters": [{"name": "m1", "cluster": {"server": server}}],
        "users": [{"name": "tether", "user": {"token": MEMBER_TOKEN}}],
        "contexts": [{"name": "m1", "context": {"cluster": "m1", "user": "tether"}}]}))
    return path


async def karmada_members(kube: KubeClient, namespace: str, suffix: str) -> dict[str, str]:
    """Clusters in push mode whose Secrets hold: a token for an endpoint that refuses connections, bytes that are
    not text, nothing. Returns {role: cluster name}."""
    secrets_ = {"refused": {"token": base64.b64encode(CLUSTER_TOKEN.encode()).decode()},
                "garbled": {"token": base64.b64encode(b"\xff\xfe" + CLUSTER_TOKEN.encode()).decode()},
                "empty": {}}
    names = {}
    for role, data in secrets_.items():
        names[role] = name = f"sec-{role}-{suffix}"
        await kube.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                    "metadata": {"name": f"{name}-secret", "namespace": namespace}, "data": data},
                          namespace=namespace)
        cluster = manifests.cluster(name)
        cluster.pop("status")
        cluster["spec"].update({"apiEndpoint": "https://127.0.0.1:1",
                                "secretRef": {"namespace": namespace, "name": f"{name}-secret"}})
        await kube.create(CLUSTERS, cluster)
    return names


async def catalog_token_by_file(stack: Stack, path: Path) -> None:
    """The catalog wants a bearer token from now on; the plugin ConfigMap names the file that holds it."""
    await asyncio.to_thread(path.write_text, CATALOG_TOKEN + "\n")
    stack.catalog.require_auth("bearer", token=CATALOG_TOKEN)
    namespace, name = stack.plugin_configmap.split("/")
    configmap = await stack.kube.get(CONFIGMAPS, name, namespace=namespace)
    assert configmap is not None
    entry = json.loads(configmap["data"]["amoro"])
    entry["endpoint"]["auth"] = {"type": "bearer", "tokenFile": str(path)}
    configmap["data"]["amoro"] = json.dumps(entry)
    await stack.kube.replace(CONFIGMAPS, name, configmap, namespace=namespace)
    assert stack.daemon is not None
    daemon = stack.daemon

    async def configured() -> bool:
        plugin = daemon.world.plugins.plugins.get("amoro")
        return plugin is not None and plugin.auth.token_file == str(path)

    await eventually(configured, "the plugin naming its token file")


async def get(http: aiohttp.ClientSession, stack: Stack, path: str, context: ssl.SSLContext) -> str:
    assert stack.daemon is not None and stack.daemon.endpoints is not None
    async with http.get(f"https://127.0.0.1:{stack.daemon.endpoints.port}{path}", ssl=context) as response:
        assert response.status == 200
        return await response.text()


async def push(http: aiohttp.ClientSession, stack: Stack, context: ssl.SSLContext, body: Any,
               authorization: str | None) -> int:
    assert stack.daemon is not None and stack.daemon.endpoints is not None
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with http.post(f"https://127.0.0.1:{stack.daemon.endpoints.port}/v1/notifications/table-moved",
                         json=body, headers=headers, ssl=context) as response:
        return response.status


async def test_no_secret_appears_in_any_output_of_a_run(kube: KubeEnv, tmp_path: Path) -> None:
    async with kube.member_endpoint(crds=MEMBER_CRDS) as emulator:
        await run_and_search_every_output(kube, tmp_path, emulator)


async def run_and_search_every_output(kube: KubeEnv, tmp_path: Path, emulator: KubeEmulator) -> None:
    cert, key, ca = ensure_self_signed(tmp_path / "tls", names=["127.0.0.1"])
    context = ssl.create_default_context(cadata=ca.decode())
    config = member_kubeconfig(tmp_path / "member.kubeconfig", emulator.url)
    assert leaks(config.read_text()) == [MEMBER_TOKEN]  # the search finds a secret where there is one
    client = KubeClient(kube.api_client)
    suffix = secrets.token_hex(3)
    options = {"members": {"m1": str(config)}, "members_from_karmada": True, "http_tls_cert": str(cert),
               "http_tls_key": str(key)}
    await kube.register_crds(*CRDS)
    with captured_logs() as logs:
        clusters = await karmada_members(client, kube.namespace, suffix)
        try:
            async with tether_stack(kube, push_token=PUSH_TOKEN, daemon_options=options) as stack, \
                    aiohttp.ClientSession() as http:
                daemon = stack.daemon
                assert daemon is not None and daemon.members is not None
                await catalog_token_by_file(stack, tmp_path / "catalog-token")
                table = stack.add_table("kept", "east")
                await stack.apply(manifests.claim("kept", namespace=stack.namespace, table=table))
                await stack.apply(manifests.claim("lost", namespace=stack.namespace, table=stack.table("nowhere")))
                await stack.wait_claim("kept", phase="Bound")
                await stack.wait_claim("lost", reason="DataSourceNotFound")
                body = {"system": "amoro", "dataSourceName": table}
                assert await push(http, stack, context, body, None) == 401
                assert await push(http, stack, context, body, f"Bearer {PUSH_TOKEN[:-1]}") == 401
                assert await push(http, stack, context, body, f"Bearer {PUSH_TOKEN}x") == 401
                assert await push(http, stack, context, body, PUSH_TOKEN) == 401  # (no "Bearer")
                assert await push(http, stack, context, body, f"Bearer {PUSH_TOKEN}") == 202
                with pytest.raises(aiohttp.ClientError):  # the port speaks TLS only: a token never goes in clear
                    async with http.post(f"http://127.0.0.1:{daemon.endpoints.port}/v1/notifications/table-moved",
                                         json=body):
                        pass

                async def members_tried() -> bool:
                    refused = daemon.members.members.get(clusters["refused"])
                    state = daemon.world.members.clusters.get("m1")
                    text = logs.getvalue()
                    return (state is not None and not state.lists_pending and refused is not None
                            and any(s.errors for s in refused.sources)
                            and "token is unreadable" in text and "has no token" in text)

                await eventually(members_tried, "the members joined, refused, and refused to join", within=30)
                await stack.wait_idle()
                metrics = await get(http, stack, "/metrics", context)
                status = await get(http, stack, "/status", context)
                events, _ = await client.list(EVENTS)
                database = await asyncio.to_thread(lambda: b"".join(p.read_bytes()
                                                                     for p in Path(stack.tmp).glob("tether.db*")))
        finally:
            for name in clusters.values():
                with contextlib.suppress(Exception):
                    await client.delete(CLUSTERS, name)
    text = logs.getvalue()
    outputs = {"logs": text, "metrics": metrics, "status": status, "events": repr(events), "log": database}
    # each output holds what the run did
    assert "member cluster joined" in text and clusters["garbled"] in text
    assert "tether_events_total" in metrics
    assert clusters["refused"] in status and '"m1"' in status
    assert any(e.get("reason") == "DataSourceNotFound" for e in events)
    assert b"kept" in database and clusters["refused"].encode() in database
    assert {name: leaks(output) for name, output in outputs.items()} == {name: [] for name in outputs}
