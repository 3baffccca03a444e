"""A catalog that answers badly: a failing OAuth2 token endpoint, malformed LoadTableResponses, error bodies that
are not Iceberg's JSON. Each ends in a clear ``DataLocationLookupFailed`` (or ``DataSourceNotInCatalog`` for a 404)
that says what was wrong, retryable exactly when another attempt may help — never an "unexpected error".

The sandbox catalog answers like a well-behaved server; these answers come from a scripted one: each path is given
the responses it returns, in order (the last one repeats).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tether.adapters.catalog.iceberg_rest import AmoroResolver
from tether.core.events import DataLocationLookupFailed, DataLocationResolved, DataSourceNotInCatalog
from tether.core.identity import make_identity

ORDERS = make_identity("amoro", "table", "prod.sales.orders", None)
TABLE_PATH = "/api/iceberg/rest/v1/catalogs/prod/namespaces/sales/tables/orders"
TOKEN_PATH = "/oauth/token"
GOOD_TABLE = {"metadata-location": "s3://w/m.json",
              "metadata": {"format-version": 2, "location": "s3://warehouse-east/prod/sales/orders", "properties": {}}}


@dataclass
class Answer:
    status: int = 200
    body: bytes | str | Any = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


class Scripted:
    """An HTTP server answering each path from its script; counts the requests per path."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Answer]] = {}
        self.requests: dict[str, int] = {}
        self.forms: list[dict[str, str]] = []  # the form of each token request
        self.url = ""

    def script(self, path: str, *answers: Answer) -> None:
        self.scripts[path] = list(answers)

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        self.requests[path] = self.requests.get(path, 0) + 1
        if request.method == "POST":
            self.forms.append({k: str(v) for k, v in (await request.post()).items()})
        script = self.scripts.get(path) or [Answer(404, {"error": {"message": "no such path", "type": "X"}})]
        answer = script.pop(0) if len(script) > 1 else script[0]
        body = answer.body
        if not isinstance(body, bytes | str):
            body = json.dumps(body)
        return web.Response(status=answer.status, body=body.encode() if isinstance(body, str) else body,
                            content_type=answer.content_type, headers=answer.headers)


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    server = Scripted()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        yield server
    finally:
        await runner.cleanup()


def oauth2(url: str) -> dict[str, str]:
    return {"type": "oauth2", "tokenUrl": url, "clientId": "tether", "clientSecret": "s3cret"}


async def resolve(plugin: Any, fake_time: Any) -> Any:
    r = AmoroResolver(plugin, **fake_time.options())
    try:
        return await r.resolve(ORDERS)
    finally:
        await r.aclose()


# --- the OAuth2 token endpoint ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "words", "retryable"), [
    (Answer(503, "overloaded", "text/plain"), "OAuth2 token endpoint {url} answered 503", True),
    (Answer(500, "<html>oops</html>", "text/html"), "OAuth2 token endpoint {url} answered 500", True),
    (Answer(200, "<html>login</html>", "text/html"), "OAuth2 token endpoint {url} returned no access_token", True),
    (Answer(200, {"token_type": "bearer"}), "OAuth2 token endpoint {url} returned no access_token", True),
    (Answer(200, {"access_token": "t", "expires_in": "soon"}), "returned no access_token", True),
    (Answer(400, {"error": "invalid_scope"}), "OAuth2 token request to {url} was rejected (400)", False),
])
async def test_a_failing_token_endpoint_is_a_clear_failure(scripted: Scripted, make_plugin: Any, fake_time: Any,
                                                           answer: Answer, words: str, retryable: bool) -> None:
    scripted.script(TOKEN_PATH, answer)
    scripted.script(TABLE_PATH, Answer(body=GOOD_TABLE))
    token_url = scripted.url + TOKEN_PATH
    out = await resolve(make_plugin(scripted.url, auth=oauth2(token_url), retry={"maxRetries": 2}), fake_time)
    assert isinstance(out, DataLocationLookupFailed), out
    assert words.format(url=token_url) in out.message and out.retryable is retryable
    assert "unexpected error" not in out.message and "s3cret" not in out.message
    assert scripted.requests.get(TABLE_PATH, 0) == 0  # no table request without a token
    assert scripted.requests[TOKEN_PATH] == (3 if retryable else 1)  # retried as the plugin says, or not at all


async def test_a_token_endpoint_that_recovers_within_the_retries_resolves(scripted: Scripted, make_plugin: Any,
                                                                          fake_time: Any) -> None:
    scripted.script(TOKEN_PATH, Answer(429, "slow down", "text/plain", {"Retry-After": "2"}),
                    Answer(200, {"access_token": "fresh", "expires_in": 600}))
    scripted.script(TABLE_PATH, Answer(body=GOOD_TABLE))
    out = await resolve(make_plugin(scripted.url, auth=oauth2(scripted.url + TOKEN_PATH)), fake_time)
    assert isinstance(out, DataLocationResolved)
    assert fake_time.sleeps == [2.0]  # the endpoint's Retry-After, honoured
    assert scripted.requests[TOKEN_PATH] == 2


async def test_an_unreachable_token_endpoint_is_a_retryable_failure(scripted: Scripted, make_plugin: Any,
                                                                    fake_time: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/token"  # nobody listens once the block ends
    out = await resolve(make_plugin(scripted.url, auth=oauth2(closed), retry={"maxRetries": 0}), fake_time)
    assert isinstance(out, DataLocationLookupFailed) and out.retryable
    assert f"OAuth2 token endpoint {closed} unreachable" in out.message


# --- malformed LoadTableResponses -------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "words"), [
    ([], "no 'metadata' object"),
    ({"metadata": "s3://x"}, "no 'metadata' object"),
    ({"metadata": {"location": 42}}, "'metadata.location' is not a string but a number"),
    ({"metadata": {"format-version": 2}}, "'metadata.location' missing"),
    ({"metadata": {"location": "s3://x", "properties": ["write.data.path"]}}, "'metadata.properties' is not an object"),
    (b"\xff\xfe{not utf-8", "malformed LoadTableResponse"),
    (b'{"metadata": {"location": "s3://x"', "malformed LoadTableResponse"),
])
async def test_a_malformed_load_table_response_is_a_clear_failure(scripted: Scripted, make_plugin: Any,
                                                                  fake_time: Any, body: Any, words: str) -> None:
    scripted.script(TABLE_PATH, Answer(body=body))
    out = await resolve(make_plugin(scripted.url, retry={"maxRetries": 2}), fake_time)
    assert isinstance(out, DataLocationLookupFailed), out
    assert "malformed LoadTableResponse for 'prod.sales.orders'" in out.message and words in out.message
    assert out.retryable and scripted.requests[TABLE_PATH] == 1  # not retried at once: the decider asks later


async def test_a_write_data_path_override_wins_over_the_location(scripted: Scripted, make_plugin: Any,
                                                                 fake_time: Any) -> None:
    scripted.script(TABLE_PATH, Answer(body={"metadata": {"location": "s3://a/t",
                                                          "properties": {"write.data.path": "s3://b/data"}}}))
    out = await resolve(make_plugin(scripted.url), fake_time)
    assert isinstance(out, DataLocationResolved) and out.location == "s3://b/data"


# --- error bodies that are not Iceberg's JSON -------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "words"), [
    (Answer(502, "<html><body>502 Bad Gateway</body></html>", "text/html"), "answered 502: <html><body>502 Bad"),
    (Answer(500, "upstream down", "text/plain"), "answered 500: upstream down"),
    (Answer(503, b""), "answered 503: (empty body)"),
    (Answer(500, {"error": "boom"}), 'answered 500: {"error": "boom"}'),
    (Answer(500, {"error": {"code": 500}}), 'answered 500: {"error": {"code": 500}}'),
    (Answer(500, {"error": {"message": "x" * 5000, "type": "ServerError"}}), "answered 500: ServerError: xxx"),
])
async def test_a_server_error_with_any_body_is_a_retryable_failure_quoting_it(
        scripted: Scripted, make_plugin: Any, fake_time: Any, answer: Answer, words: str) -> None:
    scripted.script(TABLE_PATH, answer)
    out = await resolve(make_plugin(scripted.url, retry={"maxRetries": 1}), fake_time)
    assert isinstance(out, DataLocationLookupFailed) and out.retryable, out
    assert words in out.message and "unexpected error" not in out.message
    assert len(out.message) < 1000  # a huge error body is not copied into the claim's condition
    assert scripted.requests[TABLE_PATH] == 2


@pytest.mark.parametrize("answer", [
    Answer(404, "<html>Not Found</html>", "text/html"),
    Answer(404, {"error": "NoSuchTable"}),
])
async def test_a_404_with_any_body_is_not_in_catalog(scripted: Scripted, make_plugin: Any, fake_time: Any,
                                                     answer: Answer) -> None:
    scripted.script(TABLE_PATH, answer)
    out = await resolve(make_plugin(scripted.url), fake_time)
    assert isinstance(out, DataSourceNotInCatalog), out
    assert "table 'prod.sales.orders' not found in catalog" in out.message


async def test_the_token_request_carries_the_configured_scope(scripted: Scripted, make_plugin: Any,
                                                              fake_time: Any) -> None:
    scripted.script(TOKEN_PATH, Answer(200, {"access_token": "t", "expires_in": 600}))
    scripted.script(TABLE_PATH, Answer(body=GOOD_TABLE))
    auth = {**oauth2(scripted.url + TOKEN_PATH), "scope": "catalog:read"}
    assert isinstance(await resolve(make_plugin(scripted.url, auth=auth), fake_time), DataLocationResolved)
    assert scripted.forms == [{"grant_type": "client_credentials", "client_id": "tether", "client_secret": "s3cret",
                               "scope": "catalog:read"}]


async def test_a_401_on_a_static_token_is_not_retried(scripted: Scripted, make_plugin: Any, fake_time: Any) -> None:
    """Only a cached OAuth2 token may have been revoked and be worth one more try; a bearer token that is refused
    will be refused again."""
    scripted.script(TABLE_PATH, Answer(401, {"error": {"message": "bad token", "type": "NotAuthorizedException"}}))
    out = await resolve(make_plugin(scripted.url, auth={"type": "bearer", "token": "static"}), fake_time)
    assert isinstance(out, DataLocationLookupFailed) and not out.retryable and "denied access (401)" in out.message
    assert scripted.requests[TABLE_PATH] == 1
