"""tether's admission webhooks: ``admission.k8s.io/v1`` AdmissionReview over HTTPS, answered from memory.

A mutating webhook is on the API server's write path: every CREATE or UPDATE it intercepts waits for its answer.
So the answer is computed, never fetched — a handler is a plain synchronous function of the request and of the
world the daemon already holds (its decision is a pure function in ``core/``); nothing here calls out, and one
request costs a JSON decode, that function and a JSON encode.

* **One server, one path per webhook** (``/mutate/resourcebindings``, ``/mutate/pods/{cluster}`` …), on aiohttp
  like the daemon's other endpoints. A path may have variables (aiohttp's ``{name}``): their values are passed to
  the handler as keyword arguments — one handler serves every member cluster, each member's webhook configuration
  naming its own path, and members joining at run time need no new route. A handler returns a
  :class:`WebhookAnswer`: allowed or denied, a JSON Patch (sent base64-encoded with ``patchType: JSONPatch``),
  warnings — or an awaitable of one, when it records its decision in the log before the API server acts on it.
* **Served only from a current world, judged per path.** ``serving()`` is the server's gate, common to every
  path: whether this replica may answer at all (a standby or a daemon still recovering its world may not). What
  is "complete enough" differs per webhook — the ResourceBinding webhook needs every control-plane list ended,
  the pod webhook only the lists of the member asking — so that is the handler's check: it raises
  :class:`NotServing`. Either way the answer is 503 and the API server applies the webhook's ``failurePolicy``
  — the choice of what happens then is the webhook configuration's (``ops/webhook/``, ``ops/members/``), not
  this server's. One server serves every webhook (one port, one certificate): a member still listing then holds
  back only its own pods, a Karmada relist only the bindings.
* **TLS** from a certificate and key file (a Secret mounted by cert-manager, or written by
  :mod:`.webhook_certs`), re-read when the files change: certificates rotate without a restart. New handshakes
  use the new certificate; connections already open keep theirs until they close.
* **Bad requests** (not an AdmissionReview, no ``request.uid``) get a 400 with a one-line reason. A handler that
  raises is logged with the object's key and answered 500: like tether being down, it is a failure of the call,
  and the webhook's ``failurePolicy`` decides for every failure alike, so one policy says what a workload risks.

Each answer is timed (``observe(webhook, outcome, seconds)``) for the daemon's metrics.
"""

from __future__ import annotations

import base64
import inspect
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any, Protocol

import msgspec
import structlog
from aiohttp import web

log = structlog.get_logger("tether.webhook")

ADMISSION_API_VERSION = "admission.k8s.io/v1"


class AdmissionRequest(msgspec.Struct, rename="camel", frozen=True):
    """The part of ``AdmissionReview.request`` a handler reads (unknown fields are ignored)."""

    uid: str
    operation: str = ""  # CREATE | UPDATE | DELETE | CONNECT
    namespace: str = ""
    name: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    dry_run: bool = False
    sub_resource: str = ""


class _Review(msgspec.Struct, rename="camel"):
    api_version: str = ""
    kind: str = ""
    request: AdmissionRequest | None = None


class WebhookAnswer(msgspec.Struct, frozen=True):
    """What a handler decided. ``patch`` is a JSON Patch (RFC 6902) against the request's object."""

    allowed: bool = True
    patch: tuple[dict[str, Any], ...] = ()
    message: str = ""  # shown to the client when denied
    code: int = 403
    warnings: tuple[str, ...] = ()


class WebhookHandler(Protocol):
    """Answers at once, or awaits (to record its decision before answering). Keyword arguments: the values of the
    path's variables, if it has any."""

    def __call__(self, request: AdmissionRequest, /, **params: str) -> WebhookAnswer | Awaitable[WebhookAnswer]: ...


class NotServing(Exception):
    """Raised by a handler whose part of the world is not current: answered 503 (the failurePolicy applies)."""


Observe = Callable[[str, str, float], None]

_review_decoder = msgspec.json.Decoder(_Review)
_encoder = msgspec.json.Encoder()


def review_response(uid: str, answer: WebhookAnswer) -> dict[str, Any]:
    """The AdmissionReview the API server expects back for ``answer``."""
    response: dict[str, Any] = {"uid": uid, "allowed": answer.allowed}
    if answer.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(_encoder.encode(list(answer.patch))).decode()
    if not answer.allowed:
        response["status"] = {"code": answer.code, "message": answer.message}
    if answer.warnings:
        response["warnings"] = list(answer.warnings)
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def object_key(request: AdmissionRequest) -> str:
    """``Kind/namespace/name`` of the request's object, for log lines (a CREATE may have no name yet)."""
    obj = request.object or request.old_object or {}
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = request.name or meta.get("name") or meta.get("generateName", "") + "*"
    return f"{obj.get('kind', '?')}/{request.namespace}/{name}"


class WebhookServer:
    """Serves ``handlers`` (path → handler) over HTTPS; see the module doc."""

    def __init__(self, *, handlers: Mapping[str, WebhookHandler], cert_file: str, key_file: str,
                 serving: Callable[[], tuple[bool, str]], host: str = "0.0.0.0", port: int = 9443,
                 observe: Observe | None = None, reload_interval: float = 30.0) -> None:
        self.handlers = dict(handlers)
        self.cert_file = cert_file
        self.key_file = key_file
        self.serving = serving
        self.host = host
        self.port = port
        self.observe = observe
        self.reload_interval = reload_interval
        self._runner: web.AppRunner | None = None
        self._ssl: ssl.SSLContext | None = None
        self._loaded: tuple[float, float] = (0.0, 0.0)
        self._checked = 0.0

    # --- TLS -------------------------------------------------------------------------------------------------

    def _mtimes(self) -> tuple[float, float]:
        return os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime

    def _load(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        self._ssl.load_cert_chain(self.cert_file, self.key_file)  # replaces the chain for new handshakes
        self._loaded = self._mtimes()
        return self._ssl

    def reload_if_changed(self) -> bool:
        """Re-read the certificate when its files changed (cert-manager rotated them); True when it did."""
        try:
            if self._mtimes() == self._loaded:
                return False
            self._load()
        except (OSError, ssl.SSLError) as exc:  # a half-written rotation: keep serving the old chain, retry later
            log.warning("could not reload the webhook certificate; keeping the current one", error=str(exc))
            return False
        log.info("reloaded the webhook certificate", cert=self.cert_file)
        return True

    # --- HTTP ------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        for path in self.handlers:
            app.router.add_post(path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._load())
        await site.start()
        server = site._server  # the bound port, when 0 was asked for
        sockets = getattr(server, "sockets", None) or ()
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("admission webhooks serving", port=self.port, paths=sorted(self.handlers))

    async def stop(self) -> None:
        if self._runner is not None:
            with suppress(Exception):
                await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        path = request.match_info.route.resource.canonical if request.match_info.route.resource else request.path
        if started - self._checked > self.reload_interval:
            self._checked = started
            self.reload_if_changed()
        try:
            review = _review_decoder.decode(await request.read())
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return self._done(path, "bad-request", started,
                              web.Response(status=400, text=f"not an admission.k8s.io/v1 AdmissionReview: {exc}"))
        if review.request is None:
            return self._done(path, "bad-request", started,
                              web.Response(status=400, text="AdmissionReview without a request"))
        current, why = self.serving()
        if not current:  # the API server applies the webhook's failurePolicy
            return self._done(path, "not-serving", started, web.Response(status=503, text=why))
        handler = self.handlers[path]
        try:
            result = handler(review.request, **request.match_info)
            answer = await result if inspect.isawaitable(result) else result
        except NotServing as exc:
            return self._done(path, "not-serving", started, web.Response(status=503, text=str(exc)))
        except Exception as exc:
            log.exception("webhook handler failed; the webhook's failurePolicy applies", webhook=path,
                          key=object_key(review.request))
            return self._done(path, "error", started,
                              web.Response(status=500, text=f"tether webhook {path} failed: {exc!r}"[:512]))
        outcome = "patched" if answer.patch else "allowed" if answer.allowed else "denied"
        body = _encoder.encode(review_response(review.request.uid, answer))
        return self._done(path, outcome, started, web.Response(body=body, content_type="application/json"))

    def _done(self, path: str, outcome: str, started: float, response: web.Response) -> web.Response:
        if self.observe is not None:
            self.observe(path, outcome, time.perf_counter() - started)
        return response


def json_patch_ops(ops: Sequence[tuple[str, str, Any]]) -> tuple[dict[str, Any], ...]:
    """``(op, path, value)`` triples as JSON Patch operations (``value`` is dropped for ``remove``)."""
    return tuple({"op": op, "path": path} if op == "remove" else {"op": op, "path": path, "value": value}
                 for op, path, value in ops)

