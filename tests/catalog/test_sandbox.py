"""The sandbox catalog itself: its wire format, its admin API over HTTP, and the standalone server."""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import aiohttp

from tether.adapters.catalog.registry import ResolverSet
from tether.adapters.sandbox.catalog import SandboxCatalog
from tether.core.events import DataLocationResolved
from tether.core.identity import make_identity
from tether.core.plugin_config import parse_plugin_configmap

TABLE = "/api/iceberg/rest/v1/catalogs/prod/namespaces/sales/tables/orders"


async def test_load_table_response_shape(sandbox):
    async with aiohttp.ClientSession() as s, s.get(sandbox.url + TABLE) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert set(body) == {"metadata-location", "metadata", "config"}
    meta = body["metadata"]
    assert meta["format-version"] == 2 and meta["location"] == "s3://warehouse-east/prod/sales/orders"
    assert body["metadata-location"].startswith(meta["location"] + "/metadata/")
    assert meta["table-uuid"] and meta["properties"] == {}


async def test_error_bodies_use_the_iceberg_rest_format(sandbox):
    async with aiohttp.ClientSession() as s:
        async with s.get(sandbox.url + TABLE.replace("orders", "nope")) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"] == {
                "message": "Table does not exist: sales.nope", "type": "NoSuchTableException", "code": 404
            }
        sandbox.fail_next(1, status=429, retry_after=2)
        async with s.get(sandbox.url + TABLE) as resp:
            assert resp.status == 429 and resp.headers["Retry-After"] == "2"
        async with s.get(sandbox.url + "/api/iceberg/rest/v1/config") as resp:
            assert await resp.json() == {"defaults": {}, "overrides": {}}


async def test_admin_api_over_http(sandbox):
    async with aiohttp.ClientSession(base_url=sandbox.url) as s:
        async with s.post("/_sandbox/tables", json={"name": "prod.ml.features", "location": "s3://warehouse-west/f"}):
            pass
        async with s.get("/api/iceberg/rest/v1/catalogs/prod/namespaces/ml/tables/features") as resp:
            assert (await resp.json())["metadata"]["location"] == "s3://warehouse-west/f"
        async with s.post("/_sandbox/move", json={"name": "prod.ml.features", "location": "s3://warehouse-east/f2",
                                                  "via": "write.data.path"}) as resp:
            assert resp.status == 200
        assert sandbox.table("prod.ml.features").properties["write.data.path"] == "s3://warehouse-east/f2"
        async with s.post("/_sandbox/faults", json={"kind": "status", "status": 500, "count": 2}) as resp:
            assert resp.status == 201
        for _ in range(2):
            async with s.get(TABLE) as resp:
                assert resp.status == 500
        async with s.get(TABLE) as resp:
            assert resp.status == 200
        async with s.post("/_sandbox/auth", json={"mode": "bearer", "token": "abc"}):
            pass
        async with s.get(TABLE) as resp:
            assert resp.status == 401
        async with s.get(TABLE, headers={"Authorization": "Bearer abc"}) as resp:
            assert resp.status == 200
        async with s.get("/_sandbox/stats") as resp:
            stats = await resp.json()
        assert stats["requests"] == {"prod.ml.features": 1, "prod.sales.orders": 5} and stats["total"] == 6
        async with s.post("/_sandbox/reset") as resp:
            assert (await resp.json())["total"] == 0


async def test_fifty_claims_on_one_table_cost_one_lookup(sandbox):
    """What the benchmarks assert: concurrent resolves of one identity share a single catalog request."""
    doc = json.dumps({"system": "amoro", "endpoint": {"url": sandbox.url}})
    rs = ResolverSet(parse_plugin_configmap({"amoro": doc}))
    sandbox.delay_next(1, 0.05)
    ident = make_identity("amoro", "table", "prod.sales.customers", None)
    outs = await asyncio.gather(*(rs.resolve(ident) for _ in range(50)))
    assert all(isinstance(o, DataLocationResolved) and o.location.startswith("s3://warehouse-west/") for o in outs)
    assert sandbox.requests_for("prod.sales.customers") == 1
    await rs.aclose()


async def test_stop_does_not_wait_for_injected_latency():
    cat = SandboxCatalog()
    await cat.start()
    cat.delay_next(1, 30.0)
    async with aiohttp.ClientSession() as s:
        pending = asyncio.create_task(s.get(cat.url + TABLE))
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await cat.stop()
        assert loop.time() - t0 < 2.0
        pending.cancel()


async def test_standalone_server(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether.adapters.sandbox.catalog", "--port", str(port), "--bearer", "tok",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 10)
        assert f"127.0.0.1:{port}" in line.decode()
        async with aiohttp.ClientSession() as s:
            url = f"http://127.0.0.1:{port}{TABLE}"
            async with s.get(url, headers={"Authorization": "Bearer tok"}) as resp:
                assert resp.status == 200
            async with s.get(url) as resp:
                assert resp.status == 401
    finally:
        proc.terminate()
        await proc.wait()
