"""A sandbox Iceberg REST catalog with Amoro's paths and injectable faults, for tests, demos and benchmarks.

It serves what tether's resolvers call, with real response shapes, on loopback:

* ``GET /api/iceberg/rest/v1/config`` and ``GET /api/iceberg/rest/v1/catalogs/{catalog}/namespaces/{ns}/tables/{t}``
  — Amoro's Iceberg REST endpoint; answers are Iceberg ``LoadTableResponse`` bodies (``metadata-location``,
  ``metadata{format-version, table-uuid, location, properties}``, ``config``) and errors use the REST error
  format ``{"error": {"message", "type", "code"}}`` (404 ``NoSuchTableException``/``NoSuchNamespaceException``,
  400 for a catalog that is not an Iceberg catalog, 401 ``NotAuthorizedException``);
* ``GET /v1/config`` and ``GET /v1/namespaces/{ns}/tables/{t}`` — a generic, prefix-less Iceberg REST server,
  backed by the catalog named ``generic_catalog`` (default ``default``);
* ``POST /v1/oauth/tokens`` (also under the Amoro base) — OAuth2 client credentials, when required;
* ``GET /api/ams/v1/health/status`` — Amoro's health endpoint;
* ``/_sandbox/...`` — the admin API, mirroring the in-process methods (see :func:`_admin_routes`).

Faults are a queue of rules, each good for the next ``count`` table loads (optionally of one table): answer
a status (503, 500, 429 with Retry-After), wait (latency longer than a client timeout is a timeout), or send a
hostile body: ``malformed`` (HTML where JSON was expected), ``garbage`` (any text as ``application/json``: wrong
JSON, JSON of the wrong types), ``huge`` (a well-formed JSON body of ``size`` bytes, sent in chunks) or ``stream``
(a 200 that never ends: chunks of JSON whitespace until the client hangs up or the server stops). A rule with
``probability`` below 1 fires on that share of the loads it matches (drawn from the catalog's seeded random
source, so a run is reproducible); the others pass it by without using it up. Every matching ``delay`` rule
applies, then the first matching rule of another kind — so "50 % 503 with 2 s latency" is two rules. Faults come
before authentication, as they would from a proxy in front of the catalog. Latency sleeps and endless streams end
early when the server stops, so tests never wait on an abandoned request.

The server counts table loads per table (arrivals, faulted or not) and the maximum number in flight, so
tests and benchmarks can assert "50 claims on one table → 1 lookup" and "never more than N at once".

Standalone: ``python -m tether.adapters.sandbox.catalog --port 8181`` (``--help`` for auth options).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import random
import secrets
import ssl
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

AMORO_BASE = "/api/iceberg/rest"
NON_ICEBERG_CATALOGS = ("hive_legacy",)

#: (dotted name, location, properties): two regions, one table whose data was moved by write.data.path.
SEED_TABLES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("prod.sales.orders", "s3://warehouse-east/prod/sales/orders", {}),
    ("prod.sales.customers", "s3://warehouse-west/prod/sales/customers", {}),
    (
        "prod.events.clicks",
        "s3://warehouse-east/prod/events/clicks",
        {"write.data.path": "s3://warehouse-west/prod/events/clicks/data"},
    ),
    ("analytics.marketing.campaigns", "s3://warehouse-west/analytics/marketing/campaigns", {}),
    ("default.web.sessions", "s3://warehouse-east/default/web/sessions", {}),
    ("default.web.daily.visits", "s3://warehouse-west/default/web/daily/visits", {}),
)


@dataclass
class SandboxTable:
    catalog: str
    namespace: tuple[str, ...]
    name: str
    location: str
    properties: dict[str, str] = field(default_factory=dict)
    table_uuid: str = field(default_factory=lambda: str(uuid.uuid4()))
    version: int = 1

    @property
    def key(self) -> str:
        return ".".join((self.catalog, *self.namespace, self.name))

    def load_response(self) -> dict[str, Any]:
        return {
            "metadata-location": f"{self.location}/metadata/{self.version:05d}-{self.table_uuid}.metadata.json",
            "metadata": {
                "format-version": 2,
                "table-uuid": self.table_uuid,
                "location": self.location,
                "last-updated-ms": int(time.time() * 1000),
                "properties": dict(self.properties),
                "schemas": [{"type": "struct", "schema-id": 0, "fields": []}],
                "current-schema-id": 0,
                "partition-specs": [{"spec-id": 0, "fields": []}],
                "default-spec-id": 0,
                "sort-orders": [{"order-id": 0, "fields": []}],
                "default-sort-order-id": 0,
            },
            "config": {},
        }


@dataclass
class Fault:
    """The next ``count`` table loads (of ``table`` if set) get: kind ``status`` | ``delay`` | ``malformed`` |
    ``garbage`` | ``huge`` | ``stream`` (module doc); ``probability``: the share of matching loads it fires on."""

    kind: str
    count: int = 1
    status: int = 503
    retry_after: float | None = None
    seconds: float = 0.0
    body: str = "<html><body>502 Bad Gateway</body></html>"
    table: str | None = None
    size: int = 0
    probability: float = 1.0
    fired: int = 0


@dataclass
class Auth:
    mode: str = "none"  # none | bearer | basic | apikey | oauth2
    token: str = ""
    username: str = ""
    password: str = ""
    header: str = "X-API-Key"
    api_key: str = ""
    client_id: str = ""
    client_secret: str = ""
    expires_in: int = 3600


def split_name(name: str) -> tuple[str, tuple[str, ...], str]:
    parts = name.split(".")
    if len(parts) < 3 or not all(parts):
        raise ValueError(f"table name {name!r}: expected 'catalog.namespace[.namespace…].table'")
    return parts[0], tuple(parts[1:-1]), parts[-1]


def _error(status: int, type_: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"message": message, "type": type_, "code": status}}
    return web.json_response(body, status=status, headers=headers)


class SandboxCatalog:
    """The sandbox server. ``async with SandboxCatalog() as cat: cat.url`` or ``await start()``/``stop()``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        generic_catalog: str = "default",
        random_seed: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.generic_catalog = generic_catalog
        self.tables: dict[tuple[str, tuple[str, ...], str], SandboxTable] = {}
        self.non_iceberg_catalogs: set[str] = set(NON_ICEBERG_CATALOGS)
        self.faults: list[Fault] = []
        self.random = random.Random(random_seed)  # draws of the faults' probability: a seed makes a run repeatable
        self.auth = Auth()
        self._tokens: dict[str, float] = {}  # issued OAuth2 token -> expiry (monotonic)
        self.requests: Counter[str] = Counter()
        self.token_requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        if seed:
            for name, location, properties in SEED_TABLES:
                self.add_table(name, location, properties=properties)

    # ---------------------------------------------------------------------------------------- lifecycle

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.host}:{self.port}"

    async def start(self) -> str:
        self._stopping = asyncio.Event()
        self._runner = web.AppRunner(self.app(), handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.url

    async def stop(self) -> None:
        self._stopping.set()  # wakes latency faults
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SandboxCatalog:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def app(self) -> web.Application:
        app = web.Application()
        ns_table = "namespaces/{ns}/tables/{table}"
        app.router.add_get(f"{AMORO_BASE}/v1/config", self._config)
        app.router.add_get(f"{AMORO_BASE}/v1/catalogs/{{catalog}}/{ns_table}", self._load_table)
        app.router.add_post(f"{AMORO_BASE}/v1/oauth/tokens", self._token)
        app.router.add_get("/v1/config", self._config)
        app.router.add_get(f"/v1/{ns_table}", self._load_table)
        app.router.add_post("/v1/oauth/tokens", self._token)
        app.router.add_get("/api/ams/v1/health/status", self._health)
        _admin_routes(self, app)
        return app

    # ------------------------------------------------------------------------------------ admin methods

    def add_table(self, name: str, location: str, *, properties: dict[str, str] | None = None) -> SandboxTable:
        catalog, namespace, table = split_name(name)
        t = SandboxTable(catalog, namespace, table, location.rstrip("/"), dict(properties or {}))
        self.tables[(catalog, namespace, table)] = t
        return t

    def table(self, name: str) -> SandboxTable:
        return self.tables[split_name(name)]

    def move_table(self, name: str, location: str, *, via: str = "location") -> SandboxTable:
        """Move a table's data: change ``metadata.location`` or (``via="write.data.path"``) set the property."""
        t = self.table(name)
        if via == "write.data.path":
            t.properties["write.data.path"] = location
        elif via == "location":
            t.location = location.rstrip("/")
            t.properties.pop("write.data.path", None)
        else:
            raise ValueError(f"via: expected 'location' or 'write.data.path', got {via!r}")
        t.version += 1
        return t

    def drop_table(self, name: str) -> None:
        self.tables.pop(split_name(name), None)

    def inject(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def fail_next(self, n: int = 1, *, status: int = 503, retry_after: float | None = None,
                  table: str | None = None, probability: float = 1.0) -> Fault:
        return self.inject(Fault("status", n, status=status, retry_after=retry_after, table=table,
                                 probability=probability))

    def delay_next(self, n: int, seconds: float, *, table: str | None = None, probability: float = 1.0) -> Fault:
        return self.inject(Fault("delay", n, seconds=seconds, table=table, probability=probability))

    def release_delays(self) -> None:
        """Answer every request a ``delay`` fault is holding now (as if its delay were over)."""
        self._stopping.set()  # wakes the waiting faults; cleared at once, so later delays delay again
        self._stopping.clear()

    def malformed_next(self, n: int = 1, *, body: str | None = None, table: str | None = None) -> Fault:
        fault = Fault("malformed", n, table=table)
        if body is not None:
            fault.body = body
        return self.inject(fault)

    def garbage_next(self, n: int = 1, *, body: str, table: str | None = None) -> Fault:
        """``body`` as an ``application/json`` 200: wrong JSON, or JSON of the wrong types."""
        return self.inject(Fault("garbage", n, body=body, table=table))

    def huge_next(self, n: int = 1, *, size: int, table: str | None = None) -> Fault:
        return self.inject(Fault("huge", n, size=size, table=table))

    def stream_next(self, n: int = 1, *, table: str | None = None) -> Fault:
        return self.inject(Fault("stream", n, table=table))

    def clear_faults(self) -> None:
        self.faults.clear()

    def require_auth(self, mode: str, **settings: Any) -> None:
        """``mode``: none | bearer (token) | basic (username, password) | apikey (api_key, header) | oauth2
        (client_id, client_secret, expires_in)."""
        if mode not in {"none", "bearer", "basic", "apikey", "oauth2"}:
            raise ValueError(f"unknown auth mode {mode!r}")
        self.auth = Auth(mode=mode, **settings)
        self._tokens.clear()

    def revoke_tokens(self) -> None:
        """Invalidate every issued OAuth2 token (clients must fetch a new one)."""
        self._tokens.clear()

    def requests_for(self, name: str) -> int:
        return self.requests[name]

    def stats(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "total": sum(self.requests.values()),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "token_requests": self.token_requests,
            "faults": [f.__dict__ for f in self.faults],
        }

    def reset_stats(self) -> None:
        self.requests.clear()
        self.token_requests = 0
        self.max_in_flight = self.in_flight

    # ----------------------------------------------------------------------------------------- handlers

    def _take_faults(self, key: str) -> tuple[list[Fault], Fault | None]:
        """The delays that apply to this load, and the first other fault that does (module doc)."""
        delays: list[Fault] = []
        for fault in list(self.faults):
            if fault.table is not None and fault.table != key:
                continue
            if fault.probability < 1.0 and self.random.random() >= fault.probability:
                continue  # passed by this time, not used up
            fault.count -= 1
            fault.fired += 1
            if fault.count <= 0:
                self.faults.remove(fault)
            if fault.kind != "delay":
                return delays, fault
            delays.append(fault)
        return delays, None

    async def _sleep(self, seconds: float) -> None:
        """Sleep, ending early when the server stops."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _hostile(self, request: web.Request, fault: Fault) -> web.StreamResponse:
        """The bodies of ``garbage``, ``huge`` and ``stream`` faults."""
        if fault.kind == "garbage":
            return web.Response(text=fault.body, content_type="application/json")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        chunk = b" " * 65536
        try:
            if fault.kind == "huge":  # one JSON string of `size` bytes: well-formed, only too big
                await resp.write(b'{"metadata": {"location": "s3://x/')
                left = max(0, fault.size)
                while left > 0 and not self._stopping.is_set():
                    await resp.write(b"a" * min(left, 65536))
                    left -= 65536
                await resp.write(b'"}}')
            else:  # stream: JSON whitespace for ever, a chunk at a time
                await resp.write(b"{")
                while not self._stopping.is_set():
                    await resp.write(chunk)
                    await asyncio.sleep(0)
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the client hung up: what a client that caps the body does
        return resp

    def _authorized(self, request: web.Request) -> bool:
        a = self.auth
        header = request.headers.get("Authorization", "")
        match a.mode:
            case "bearer":
                return secrets.compare_digest(header, f"Bearer {a.token}")
            case "basic":
                expected = base64.b64encode(f"{a.username}:{a.password}".encode()).decode()
                return secrets.compare_digest(header, f"Basic {expected}")
            case "apikey":
                return secrets.compare_digest(request.headers.get(a.header, ""), a.api_key)
            case "oauth2":
                token = header.removeprefix("Bearer ")
                return token in self._tokens and self._tokens[token] > time.monotonic()
        return True

    def _unauthorized(self) -> web.Response:
        return _error(401, "NotAuthorizedException", "Not authorized: missing or invalid credentials",
                      headers={"WWW-Authenticate": "Bearer" if self.auth.mode != "basic" else "Basic"})

    async def _config(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return web.json_response({"defaults": {}, "overrides": {}})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"code": 200, "message": "success", "result": "ok"})

    async def _token(self, request: web.Request) -> web.Response:
        self.token_requests += 1
        form = await request.post()
        client_id, client_secret = str(form.get("client_id", "")), str(form.get("client_secret", ""))
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        a = self.auth
        if a.mode != "oauth2" or client_id != a.client_id or not secrets.compare_digest(client_secret, a.client_secret):
            return web.json_response(
                {"error": "invalid_client", "error_description": "unknown client or bad secret"}, status=401
            )
        token = secrets.token_urlsafe(16)
        self._tokens[token] = time.monotonic() + a.expires_in
        return web.json_response({
            "access_token": token,
            "token_type": "bearer",
            "expires_in": a.expires_in,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        })

    async def _load_table(self, request: web.Request) -> web.StreamResponse:
        catalog = request.match_info.get("catalog", self.generic_catalog)
        raw_ns = request.match_info["ns"]
        namespace = tuple(raw_ns.replace("%1F", "\x1f").replace("%1f", "\x1f").split("\x1f"))
        table = request.match_info["table"]
        key = ".".join((catalog, *namespace, table))
        self.requests[key] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            delays, fault = self._take_faults(key)
            for delay in delays:
                await self._sleep(delay.seconds)
            if fault is not None:
                if fault.kind in ("garbage", "huge", "stream"):
                    return await self._hostile(request, fault)
                if fault.kind == "malformed":
                    return web.Response(text=fault.body, content_type="text/html")
                else:
                    headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else None
                    return _error(fault.status, "ServiceUnavailableException" if fault.status == 503 else
                                  "ServerError", f"injected fault {fault.status}", headers=headers)
            if not self._authorized(request):
                return self._unauthorized()
            if catalog in self.non_iceberg_catalogs:
                return _error(400, "BadRequestException", f"catalog {catalog} is not an iceberg catalog")
            found = self.tables.get((catalog, namespace, table))
            if found is None:
                if not any(c == catalog and ns == namespace for c, ns, _ in self.tables):
                    return _error(404, "NoSuchNamespaceException",
                                  f"Namespace does not exist: {'.'.join(namespace)}")
                return _error(404, "NoSuchTableException", f"Table does not exist: {'.'.join((*namespace, table))}")
            return web.json_response(found.load_response())
        finally:
            self.in_flight -= 1


def _admin_routes(cat: SandboxCatalog, app: web.Application) -> None:
    """``/_sandbox/``: GET stats, POST reset, GET/POST tables, POST move, DELETE tables/{name},
    POST/DELETE faults, POST auth, POST revoke-tokens. Bodies are JSON with the in-process methods' arguments."""

    async def body(request: web.Request) -> dict[str, Any]:
        return await request.json() if request.can_read_body else {}

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(cat.stats())

    async def reset(_: web.Request) -> web.Response:
        cat.reset_stats()
        return web.json_response(cat.stats())

    async def list_tables(_: web.Request) -> web.Response:
        return web.json_response({t.key: {"location": t.location, "properties": t.properties}
                                  for t in cat.tables.values()})

    async def add(request: web.Request) -> web.Response:
        b = await body(request)
        try:
            t = cat.add_table(b["name"], b["location"], properties=b.get("properties"))
        except (KeyError, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"name": t.key, "location": t.location}, status=201)

    async def move(request: web.Request) -> web.Response:
        b = await body(request)
        try:
            t = cat.move_table(b["name"], b["location"], via=b.get("via", "location"))
        except (KeyError, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"name": t.key, "location": t.location, "properties": t.properties})

    async def drop(request: web.Request) -> web.Response:
        cat.drop_table(request.match_info["name"])
        return web.Response(status=204)

    async def add_fault(request: web.Request) -> web.Response:
        b = await body(request)
        try:
            fault = cat.inject(Fault(**b))
        except TypeError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(fault.__dict__, status=201)

    async def clear(_: web.Request) -> web.Response:
        cat.clear_faults()
        return web.Response(status=204)

    async def auth(request: web.Request) -> web.Response:
        b = await body(request)
        try:
            cat.require_auth(b.pop("mode", "none"), **b)
        except (TypeError, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.Response(status=204)

    async def revoke(_: web.Request) -> web.Response:
        cat.revoke_tokens()
        return web.Response(status=204)

    app.router.add_get("/_sandbox/stats", stats)
    app.router.add_post("/_sandbox/reset", reset)
    app.router.add_get("/_sandbox/tables", list_tables)
    app.router.add_post("/_sandbox/tables", add)
    app.router.add_post("/_sandbox/move", move)
    app.router.add_delete("/_sandbox/tables/{name}", drop)
    app.router.add_post("/_sandbox/faults", add_fault)
    app.router.add_delete("/_sandbox/faults", clear)
    app.router.add_post("/_sandbox/auth", auth)
    app.router.add_post("/_sandbox/revoke-tokens", revoke)


async def _serve(args: argparse.Namespace) -> None:
    cat = SandboxCatalog(host=args.host, port=args.port, seed=not args.no_seed)
    if args.bearer:
        cat.require_auth("bearer", token=args.bearer)
    elif args.oauth2:
        client_id, _, secret = args.oauth2.partition(":")
        cat.require_auth("oauth2", client_id=client_id, client_secret=secret)
    await cat.start()
    print(f"sandbox Iceberg REST catalog on {cat.url} (Amoro base {AMORO_BASE}); tables:", flush=True)
    for t in cat.tables.values():
        print(f"  {t.key} -> {t.properties.get('write.data.path', t.location)}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await cat.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tether.adapters.sandbox.catalog", description="A sandbox Iceberg REST catalog (Amoro paths)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--no-seed", action="store_true", help="start without the seeded tables")
    parser.add_argument("--bearer", metavar="TOKEN", help="require this bearer token")
    parser.add_argument("--oauth2", metavar="ID:SECRET", help="require OAuth2 client credentials")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
