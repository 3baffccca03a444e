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
  replay shows exactly what the catalog said. Answers 202 with the location found, 400 for a bad body, 401
  without the token.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tether.adapters.daemon.metrics import Metrics
from tether.core.events import DataLocationResolved, Event
from tether.core.identity import DataIdentity, make_identity


class Endpoints:
    def __init__(
        self, *, metrics: Metrics, ready: Callable[[], tuple[bool, str]],
        on_table_moved: Callable[[DataIdentity], Awaitable[Event]] | None = None, push_token: str = "",
        host: str = "0.0.0.0", port: int = 8080, status: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        self.metrics = metrics
        self.ready = ready
        self.status = status
        self.on_table_moved = on_table_moved
        self.push_token = push_token
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        self.app.add_routes([
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
            web.get("/metrics", self.metrics_handler),
            web.get("/status", self.status_handler),
            web.post("/v1/notifications/table-moved", self.table_moved),
        ])

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
        supplied = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(supplied.encode(), self.push_token.encode()):
            return web.json_response({"error": "a valid bearer token is required"}, status=401)
        try:
            body: Any = await request.json()
        except ValueError:
            return web.json_response({"error": "body must be JSON"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "body must be a JSON object"}, status=400)
        system, name = body.get("system"), body.get("dataSourceName")
        type_ = body.get("dataSourceType", "table")
        attributes = body.get("attributes") or {}
        if not (isinstance(system, str) and system and isinstance(name, str) and name and isinstance(type_, str)
                and isinstance(attributes, dict)):
            return web.json_response(
                {"error": "expected {system, dataSourceName, dataSourceType?, attributes?} as strings"}, status=400)
        assert self.on_table_moved is not None
        outcome = await self.on_table_moved(make_identity(system, type_, name, {str(k): str(v)
                                                                                 for k, v in attributes.items()}))
        answer: dict[str, Any] = {"outcome": type(outcome).__name__}
        if isinstance(outcome, DataLocationResolved):
            answer["location"] = outcome.location
        return web.json_response(answer, status=202)

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
