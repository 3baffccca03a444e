"""The S3 stand-in under the durable test broker (adapters/testing/s3_server.py): the parts of S3 tansu relies on."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tether.adapters.testing.s3_server import S3App


@pytest.fixture
async def s3() -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    server = TestServer(S3App().app())
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            base = str(server.make_url("/b"))
            async with session.put(base) as resp:
                assert resp.status == 200
            yield session, base
    finally:
        await server.close()


async def test_conditional_puts_create_once_and_update_only_the_version_read(
        s3: tuple[aiohttp.ClientSession, str]) -> None:
    session, base = s3
    async with session.put(f"{base}/k", data=b"1", headers={"If-None-Match": "*"}) as resp:
        assert resp.status == 200
        first = resp.headers["ETag"]
    async with session.put(f"{base}/k", data=b"2", headers={"If-None-Match": "*"}) as resp:
        assert resp.status == 412
    async with session.put(f"{base}/k", data=b"3", headers={"If-Match": '"stale"'}) as resp:
        assert resp.status == 412
    async with session.put(f"{base}/k", data=b"4", headers={"If-Match": first}) as resp:
        assert resp.status == 200 and resp.headers["ETag"] != first
    async with session.get(f"{base}/k") as resp:
        assert (resp.status, await resp.read()) == (200, b"4")
        assert resp.headers["Last-Modified"]
    async with session.get(f"{base}/k", headers={"If-None-Match": resp.headers["ETag"]}) as resp:
        assert resp.status == 304
    async with session.head(f"{base}/k") as resp:
        assert resp.status == 200 and resp.headers["Content-Length"] == "1"
    async with session.get(f"{base}/missing") as resp:
        assert resp.status == 404 and "NoSuchKey" in await resp.text()


async def test_ranges_listings_and_deletes(s3: tuple[aiohttp.ClientSession, str]) -> None:
    session, base = s3
    keys = [f"t/p{p}/r/{o:05d}.batch" for p in (0, 1) for o in range(1500)]
    for key in keys:
        async with session.put(f"{base}/{key}", data=key.encode()):
            pass
    async with session.get(f"{base}/{keys[0]}", headers={"Range": "bytes=2-5"}) as resp:
        assert resp.status == 206 and await resp.read() == keys[0].encode()[2:6]

    async def listing(**query: str) -> list[str]:
        found: list[str] = []
        token = ""
        while True:
            params = {"list-type": "2", **query, **({"continuation-token": token} if token else {})}
            async with session.get(base, params=params) as resp:
                text = await resp.text()
            found += re.findall(r"<(?:Contents><Key|CommonPrefixes><Prefix)>([^<]*)</", text)
            token = next(iter(re.findall(r"<NextContinuationToken>([^<]*)<", text)), "")
            if not token:
                return found

    assert await listing(prefix="t/p1/r/") == keys[1500:]  # two pages, in order
    assert await listing(prefix="t/", delimiter="/") == ["t/p0/", "t/p1/"]
    assert await listing(prefix="t/p0/r/", **{"start-after": keys[1497]}) == keys[1498:1500]
    body = "".join(f"<Object><Key>{k}</Key></Object>" for k in keys[:1499])
    async with session.post(base, params={"delete": ""}, data=f"<Delete>{body}</Delete>") as resp:
        assert resp.status == 200
    assert await listing(prefix="t/p0/") == [keys[1499]]
