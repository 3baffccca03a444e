"""Hostile pushed notifications: ``POST /v1/notifications/table-moved`` on the real aiohttp server, in process.

Every request gets 202 (a valid body with the right token), 400 (a bad body, with the reason), 401 (no or a
wrong token) or 413 (a body over ``MAX_PUSH_BYTES``) — never a 500 — and the server keeps serving. Only a
valid request reaches the daemon (here a recorder standing in for its re-resolution through the catalog), and
only with an identity a claim could carry too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.daemon.endpoints import MAX_PUSH_BYTES, Endpoints
from tether.adapters.daemon.metrics import Metrics
from tether.adapters.kubernetes.webhook import MAX_JSON_DEPTH
from tether.adapters.testing.hostile import ODD_STRINGS, bent, fuzz_settings, json_values, nested
from tether.core.events import DataLocationResolved, Event
from tether.core.identity import DataIdentity, identity_problem

TOKEN = "s3cr3t-push-token"
VALID = {"system": "amoro", "dataSourceType": "table", "dataSourceName": "db.t", "attributes": {"region": "eu"}}


@dataclass
class Server:
    endpoints: Endpoints
    http: aiohttp.ClientSession
    moved: list[DataIdentity] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.endpoints.port}"

    async def push(self, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        async with self.http.post(f"{self.url}/v1/notifications/table-moved", data=body, headers=headers) as resp:
            text = await resp.text()
            return resp.status, (json.loads(text) if resp.content_type == "application/json" else text)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    moved: list[DataIdentity] = []

    async def on_table_moved(identity: DataIdentity) -> Event:
        moved.append(identity)
        return DataLocationResolved(identity=identity, location="s3://east/db/t", trigger="push")

    endpoints = Endpoints(metrics=Metrics(), ready=lambda: (True, "ready"), on_table_moved=on_table_moved,
                          push_token=TOKEN, host="127.0.0.1", port=0)
    await endpoints.start()
    async with aiohttp.ClientSession() as http:
        yield Server(endpoints, http, moved)
    await endpoints.stop()


bodies = st.one_of(
    bent(VALID, max_changes=3).map(lambda doc: json.dumps(doc).encode()),
    json_values().map(lambda doc: json.dumps(doc).encode()),
    bent(VALID).map(lambda doc: json.dumps(doc).encode()).flatmap(  # truncated JSON
        lambda raw: st.integers(min_value=0, max_value=len(raw)).map(lambda n: raw[:n])),
    st.binary(max_size=64),
    st.sampled_from([nested(MAX_JSON_DEPTH + 1), nested(100_000), b"\xff\xfe", b"[" * 70_000]),
)
authorizations = st.one_of(
    st.just(f"Bearer {TOKEN}"), st.just(f"Bearer  {TOKEN} "), st.just(TOKEN), st.just(""),
    st.sampled_from([s for s in ODD_STRINGS if s.isprintable() and len(s) < 8000]).map(lambda s: f"Bearer {s}"),
    st.just(f"Bearer {TOKEN[:-1]}"), st.just(f"Bearer {TOKEN}x"),
)


@fuzz_settings()
@given(body=bodies, authorization=authorizations)
async def test_a_hostile_push_is_refused_with_a_reason_never_a_500(server: Server, body: bytes,
                                                                  authorization: str) -> None:
    server.moved.clear()
    status, answer = await server.push(body, {"Authorization": authorization} if authorization else {})
    assert status in (202, 400, 401, 413), answer
    scheme, _, token = authorization.strip().partition(" ")
    authorized = scheme == "Bearer" and token.strip() == TOKEN
    if not authorized:
        assert status == 401 and server.moved == []
        return
    if len(body) > MAX_PUSH_BYTES:
        assert status == 413
        return
    if status == 202:
        [identity] = server.moved
        assert identity_problem(identity) is None
        assert answer == {"outcome": "DataLocationResolved", "location": "s3://east/db/t"}
    else:
        assert status == 400 and answer["error"] and server.moved == []


async def test_the_bounds_are_answered_and_the_server_keeps_serving(server: Server) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, answer = await server.push(json.dumps(VALID).encode(), auth)
    assert status == 202 and answer["outcome"] == "DataLocationResolved"
    status, answer = await server.push(b" " * (MAX_PUSH_BYTES + 1), auth)
    assert status == 413 and str(MAX_PUSH_BYTES) in answer["error"]
    status, answer = await server.push(nested(MAX_JSON_DEPTH + 1), auth)
    assert status == 400 and f"nested deeper than {MAX_JSON_DEPTH}" in answer["error"]
    status, answer = await server.push(nested(MAX_JSON_DEPTH), auth)  # (as deep as allowed: JSON, not a push)
    assert status == 400 and answer["error"].startswith("body must be a JSON object")
    status, answer = await server.push(json.dumps({**VALID, "dataSourceName": " db.t"}).encode(), auth)
    assert status == 400 and "whitespace" in answer["error"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the bound holds on what is read
        for _ in range(MAX_PUSH_BYTES // 1024 + 2):
            yield b" " * 1024

    async with server.http.post(f"{server.url}/v1/notifications/table-moved", data=chunks(), headers=auth) as resp:
        assert resp.status == 413
    async with server.http.get(f"{server.url}/healthz") as resp:
        assert resp.status == 200
