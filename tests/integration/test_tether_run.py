"""``tether run`` itself, as the process a supervisor starts: its flags, its readiness, SIGTERM, an unreachable API.

The other daemon tests run :class:`Daemon` in the test's process (or through ``adapters/testing/tether_stack.py``'s own
entry point): what they cannot see is the command line — click's options and environment variables, the logging it
configures, its signal handlers and its exit code. Here the real ``tether run`` (the console script) is started as a
child process against the emulator (or the real control plane of ``TETHER_TEST_KUBECONFIG``), with the sandbox
catalog:

* with its flags, it becomes ready, binds a claim, logs JSON lines, keeps the push token out of its output, and
  stops on SIGTERM with exit code 0 and a final "tether stopped" line;
* when the API server goes away while it runs and comes back at the same address, it stays up and healthy, and
  picks up what changed meanwhile, without a restart;
* a malformed flag is a one-line usage error (exit 2), not a traceback.

The outage is an emulator of the test's own, stopped and started again on its port, its store kept (on either
run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLAIMS, CONFIGMAPS, DATASOURCES, KubeClient
from tether.adapters.sandbox.catalog import SandboxCatalog
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import KUBECONFIG_ENV, KubeEnv
from tether.adapters.testing.tether_stack import CRDS, claim_phase, eventually, release_and_delete

ROOT = Path(__file__).resolve().parents[2]
# the console script pip installed (``[project.scripts]``), as a supervisor runs it; else the same entry point
_SCRIPT = Path(sys.executable).with_name("tether")
TETHER = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from tether.adapters.cli import main; main()"]
TOKEN = "push-token-that-must-not-be-logged"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TetherRun:
    """``tether run ARGS`` in a child process; its stderr (the log) is collected."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.port = proc, port
        self.stderr: list[str] = []
        assert proc.stderr is not None
        self._reader = asyncio.create_task(self._read(proc.stderr))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.stderr.append(line.decode(errors="replace").rstrip("\n"))

    async def get(self, path: str) -> tuple[int, str]:
        try:
            async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{self.port}{path}") as resp:
                return resp.status, await resp.text()
        except aiohttp.ClientConnectionError:
            return 0, ""

    def logs(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stderr:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    async def exited(self) -> int:
        """The exit code of a process that ends by itself (within 30 s)."""
        code = await asyncio.wait_for(self.proc.wait(), 30)
        await self._reader
        return code

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.proc.wait(), 20)
        except TimeoutError:
            self.proc.kill()
            code = await self.proc.wait()
        await self._reader
        return code


@contextlib.asynccontextmanager
async def tether_run(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[TetherRun]:
    port = free_port()
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", ""))
                                                             if p), **(env or {})}
    proc = await asyncio.create_subprocess_exec(
        *TETHER, "run", "--http-port", str(port), *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env=child_env)
    run = TetherRun(proc, port)
    try:
        yield run
    finally:
        await run.stop()


async def test_tether_run_serves_binds_a_claim_and_stops_cleanly_on_sigterm(kube: KubeEnv, tmp_path: Path) -> None:
    """On the emulator, or on the real control plane of TETHER_TEST_KUBECONFIG (its Lease in the test's namespace)."""
    await kube.register_crds(*CRDS)
    client = KubeClient(kube.api_client)
    ns = kube.namespace
    kubeconfig = kube.emulator.kubeconfig_path(tmp_path) if kube.emulator is not None else os.environ[KUBECONFIG_ENV]
    async with SandboxCatalog(seed=False) as catalog:
        table = f"prod.{ns.replace('-', '_')}.orders"
        catalog.add_table(table, "s3://warehouse-east/orders")
        plugin = manifests.plugin_entry(url=catalog.url, port=None, mapping={"s3://warehouse-east/": ["east1"]})
        await client.create(CONFIGMAPS, manifests.plugin_configmap({"amoro": plugin}, namespace=ns, name="plugins"),
                            namespace=ns)
        kube.defer(lambda: _delete_data_sources_of(client, table))  # (cluster-scoped: a shared cluster keeps them)
        async with tether_run("--kubeconfig", str(kubeconfig), "--log", f"sqlite:///{tmp_path}/tether.db",
                              "--plugin-configmap", f"{ns}/plugins", "--watch-namespace", ns, "--lease-namespace", ns,
                              "--refresh-interval", "3600", "--log-level", "info", "--json-logs",
                              env={"TETHER_PUSH_TOKEN": TOKEN}) as run:
            await eventually(lambda: _ready(run), "tether run ready", within=30)
            assert await run.get("/healthz") == (200, "ok\n")
            await client.create(CLAIMS, manifests.claim("c", namespace=ns, table=table), namespace=ns)

            async def bound() -> bool:
                return claim_phase(await client.get(CLAIMS, "c", namespace=ns)) == "Bound"

            await eventually(bound, "the claim Bound by tether run", within=20)
            status, metrics = await run.get("/metrics")
            assert status == 200 and 'tether_commands_total{command="create_data_source"} 1.0' in metrics
            async with aiohttp.ClientSession() as http, http.post(  # the token from the environment is in force
                    f"http://127.0.0.1:{run.port}/v1/notifications/table-moved",
                    json={"system": "amoro", "dataSourceName": table}) as resp:
                assert resp.status == 401
            code = await run.stop()
    assert code == 0, "\n".join(run.stderr[-20:])
    logs = run.logs()
    assert logs and all("event" in entry and "level" in entry for entry in logs)  # --json-logs: JSON lines only
    assert any(entry["event"] == "tether running" for entry in logs)
    assert logs[-1]["event"] == "tether stopped" and logs[-1]["exit_code"] == 0
    assert not any(TOKEN in line for line in run.stderr)


async def _delete_data_sources_of(client: KubeClient, table: str) -> None:
    items, _ = await client.list(DATASOURCES)
    for source in items:
        if (source.get("spec") or {}).get("name") == table:
            await release_and_delete(client, DATASOURCES, source["metadata"]["name"])


async def _ready(run: TetherRun) -> bool:
    if run.proc.returncode is not None:
        raise AssertionError(f"tether run exited with {run.proc.returncode}: " + "\n".join(run.stderr[-20:]))
    return (await run.get("/readyz"))[0] == 200


async def test_tether_run_rides_out_an_api_server_outage(tmp_path: Path) -> None:
    """The API server goes away while tether runs (a restart, a network partition) and comes back at the same
    address with its state: tether stays up and healthy meanwhile, logs the broken watches, and picks up what
    changed during the outage once the server answers — without a restart of its own. (An API server unreachable
    at *start* is the preflight's: a one-line error and exit 2, tests/cli/test_errors.py.)"""
    emulator = KubeEmulator(crds=CRDS)
    await emulator.start()
    await emulator.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    api = ApiClient(emulator.configuration())
    try:
        client = KubeClient(api)
        async with SandboxCatalog(seed=False) as catalog:
            for name in ("before", "during"):
                catalog.add_table(f"prod.outage.{name}", f"s3://warehouse-east/{name}")
            plugin = manifests.plugin_entry(url=catalog.url, port=None, mapping={"s3://warehouse-east/": ["east1"]})
            await client.create(CONFIGMAPS, manifests.plugin_configmap({"amoro": plugin}, namespace="default",
                                                                       name="plugins"), namespace="default")
            async with tether_run("--kubeconfig", str(emulator.kubeconfig_path(tmp_path)),
                                  "--log", f"sqlite:///{tmp_path}/tether.db", "--plugin-configmap", "default/plugins",
                                  # one replica: the subject is the API outage, not how long the Lease outlives it
                                  "--watch-namespace", "default", "--no-leader-elect") as run:
                await eventually(lambda: _ready(run), "tether run ready", within=30)
                await client.create(CLAIMS, manifests.claim("before", namespace="default",
                                                            table="prod.outage.before"), namespace="default")
                await eventually(lambda: _bound(client, "before"), "the first claim Bound", within=20)

                await emulator.stop()  # the API server is gone: connections are refused
                await eventually(lambda: asyncio.sleep(0, any("watch" in line and "retrying" in line
                                                              for line in run.stderr)), "the broken watches logged")
                assert await run.get("/healthz") == (200, "ok\n")  # alive: nothing for a supervisor to restart
                assert run.proc.returncode is None
                # what happens meanwhile (written to the server's store directly: its HTTP side is down)
                await emulator.apply(manifests.claim("during", namespace="default", table="prod.outage.during"))
                await emulator.start()  # back, at the same address, with its state

                await eventually(lambda: _bound(client, "during"), "the claim made during the outage Bound",
                                 within=45)
                assert claim_phase(await client.get(CLAIMS, "before", namespace="default")) == "Bound"
                assert await run.stop() == 0
    finally:
        await api.close()
        await emulator.stop()


async def _bound(client: KubeClient, name: str) -> bool:
    return claim_phase(await client.get(CLAIMS, name, namespace="default")) == "Bound"


@pytest.mark.parametrize(("args", "complaint"), [
    (["--member", "no-kubeconfig"], "expected NAME=KUBECONFIG"),
    (["--http-port", "eighty"], "'eighty' is not a valid integer"),
])
async def test_a_malformed_flag_is_a_usage_error(args: list[str], complaint: str) -> None:
    async with tether_run(*args) as run:
        code = await run.exited()
    assert code == 2
    assert any(complaint in line for line in run.stderr) and not any("Traceback" in line for line in run.stderr)
