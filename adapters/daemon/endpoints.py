"""The daemon's HTTP endpoints (aiohttp — already tether's HTTP client library, so one stack for both sides).

* ``GET /healthz`` — liveness: 200 while the loops run.
* ``GET /readyz`` — readiness: 200 once the world is recovered and every watch has listed once (a standby
  replica is ready too: it is healthy, just not leading — unless it serves a webhook, so that the webhook
  Service routes to the leader only; ``Daemon.ready``), 503 with the reason otherwise.
* ``GET /metrics`` — Prometheus text format.
* ``GET /status`` — what the daemon is doing, as one JSON document (``adapters/daemon/status.py``; ``tether
  status`` renders it): leader, log positions and lag, objects tracked, admission queues, members, the last
  decisions and errors. Read-only and unauthenticated, like ``/metrics`` (it names objects, not secrets).
* ``POST /v1/notifications/table-moved`` — a pushed "this table moved" notification (bearer token). The body
  names the data source like a claim does: ``{"system", "dataSourceType" (default "table"), "dataSourceName",
  "attributes"?}``. tether does not trust the body for the location: it re-resolves the table through the
  catalog and appends the answer with ``trigger: push`` — the catalog stays the single source of truth, and a
  replay shows exactly what the catalog said. Answers 202 with the location found, 400 for a bad body (not JSON,
  nested deeper than ``MAX_JSON_DEPTH``, a field of the wrong type, a name a claim could not carry either), 401
  without the token (compared in constant time), 413 for a body over :data:`MAX_PUSH_BYTES`.

**Bounds.** Every request body is bounded (aiohttp's ``client_max_size``: 413 beyond it): the only endpoint that
reads one is the push endpoint, whose body is a few hundred bytes. **TLS**: with ``tls`` (a certificate and key
file) the endpoints are served over HTTPS, the certificate re-read when its files change, as the webhooks'
(``adapters/kubernetes/webhook.py``); the push token then never crosses the network in clear text.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tether.adapters.daemon.metrics import Metrics
from tether.adapters.kubernetes.webhook import decode_bounded, start_site
from tether.adapters.kubernetes.webhook_certs import ServingCertificate
from tether.core.events import DataLocationResolved, Event
from tether.core.identity import DataIdentity, identity_problem, make_identity

#: The largest body the endpoints read (bytes): a push notification is a few hundred.
MAX_PUSH_BYTES = 64 * 1024


class Endpoints:
    def __init__(
        self, *, metrics: Metrics, ready: Callable[[], tuple[bool, str]],
        on_table_moved: Callable[[DataIdentity], Awaitable[Event]] | None = None, push_token: str = "",
        host: str = "0.0.0.0", port: int = 8080, status: Callable[[], Awaitable[dict[str, Any]]] | None = None,
        tls: ServingCertificate | None = None,
    ) -> None:
        self.metrics = metrics
        self.ready = ready
        self.status = status
        self.on_table_moved = on_table_moved
        self.push_token = push_token
        self.host = host
        self.port = port
        self.tls = tls
        self._runner: web.AppRunner | None = None
        self._reloader: asyncio.Task[None] | None = None  # the certificate's watch (ServingCertificate.watch)
        self.app = web.Application(client_max_size=MAX_PUSH_BYTES,
                                   middlewares=[self._reload_certificate] if tls is not None else [])
        self.app.add_routes([
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
            web.get("/metrics", self.metrics_handler),
            web.get("/status", self.status_handler),
            web.post("/v1/notifications/table-moved", self.table_moved),
        ])

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @web.middleware
    async def _reload_certificate(self, request: web.Request,
                                  handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                                  ) -> web.StreamResponse:
        assert self.tls is not None
        self.tls.maybe_reload()
        return await handler(request)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        ok, why = self.ready()
        return web.Response(text=f"{why}\n", status=200 if ok else 503)

    async def metrics_handler(self, request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def status_handler(self, request: web.Request) -> web.Response:
        if self.status is None:
            return web.json_response({"error": "no status here"}, status=404)
        return web.json_response(await self.status())

    async def table_moved(self, request: web.Request) -> web.Response:
        if not self.push_token:
            return web.json_response({"error": "push notifications are disabled (no --push-token)"}, status=404)
        scheme, _, supplied = request.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer":  # (RFC 6750: "Bearer <token>"; a bare token is no credential)
            supplied = ""
        supplied = supplied.strip()
        # constant time: how long a wrong token takes to refuse says nothing about how much of it was right
        # (surrogateescape: a header's undecodable bytes, kept by aiohttp as surrogates, compare as those bytes)
        if not hmac.compare_digest(supplied.encode("utf-8", "surrogateescape"), self.push_token.encode()):
            return web.json_response({"error": "a valid bearer token is required"}, status=401)
        try:
            body: Any = decode_bounded(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"the body is at most {MAX_PUSH_BYTES} bytes"}, status=413)
        except ValueError as exc:
            return web.json_response({"error": f"body must be JSON: {exc}"[:300]}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "body must be a JSON object"}, status=400)
        system, name = body.get("system"), body.get("dataSourceName")
        type_ = body.get("dataSourceType", "table")
        attributes = body.get("attributes") or {}
        if not (isinstance(system, str) and system and isinstance(name, str) and name and isinstance(type_, str)
                and isinstance(attributes, dict) and all(isinstance(v, str) for v in attributes.values())):
            return web.json_response(
                {"error": "expected {system, dataSourceName, dataSourceType?, attributes?} as strings"}, status=400)
        identity = make_identity(system, type_, name, attributes)
        problem = identity_problem(identity)
        if problem:
            return web.json_response({"error": problem[:300]}, status=400)
        assert self.on_table_moved is not None
        outcome = await self.on_table_moved(identity)
        answer: dict[str, Any] = {"outcome": type(outcome).__name__}
        if isinstance(outcome, DataLocationResolved):
            answer["location"] = outcome.location
        return web.json_response(answer, status=202)

    async def start(self, *, sock: socket.socket | None = None) -> None:
        """Serve on ``sock`` when given (bound beforehand: ``preflight.listen``), else on ``host:port``."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        self.port = await start_site(self._runner, host=self.host, port=self.port, sock=sock,
                                     ssl_context=self.tls.context() if self.tls is not None else None)
        if self.tls is not None:  # re-read on a timer too: a rotation to a new CA lets no request through
            self._reloader = asyncio.create_task(self.tls.watch(), name="endpoints-certificate")

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
            self._reloader = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
