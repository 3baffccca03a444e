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
  :mod:`.webhook_certs`), re-read when the files change — checked by a task every ``reload_interval``, requests
  or not (:class:`~.webhook_certs.ServingCertificate`): certificates rotate without a restart. New handshakes
  use the new certificate; connections already open keep theirs until they close.
* **Bad requests** get a one-line reason and never reach a handler: a body over :data:`MAX_REVIEW_BYTES` a 413;
  one that is not an ``admission.k8s.io/v1`` ``AdmissionReview`` (not JSON, truncated, wrong types, another
  kind or version, no ``request.uid``), or nested deeper than :data:`MAX_JSON_DEPTH`, a 400. The depth bound
  keeps the decoder's recursion well inside Python's, and a recorded object inside what every log reader can
  decode again. Kubernetes sends a webhook only objects it has stored — a few MiB at most, and a pod or a
  ResourceBinding is nested some ten levels deep — so both bounds leave every real request alone. A handler that
  raises is logged with the object's key and answered 500: like tether being down, it is a failure of the call,
  and the webhook's ``failurePolicy`` decides for every failure alike, so one policy says what a workload risks.

Each answer is timed (``observe(webhook, outcome, seconds)``) for the daemon's metrics.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any, Protocol

import msgspec
import structlog
from aiohttp import web

from .webhook_certs import ServingCertificate

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

#: The largest AdmissionReview accepted (bytes). The API server stores objects of at most ~1.5 MiB (etcd's
#: request limit), and a review carries the object and the old object.
MAX_REVIEW_BYTES = 8 * 1024 * 1024
#: How deeply a JSON body may nest (objects and arrays) on every endpoint tether serves.
MAX_JSON_DEPTH = 100


def nested_deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` (decoded JSON) nests objects and arrays more than ``limit`` levels deep. Iterative: a
    check of recursion must not recurse."""
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def decode_bounded(body: bytes, *, limit: int = MAX_JSON_DEPTH, decoder: msgspec.json.Decoder[Any] | None = None
                   ) -> Any:
    """``body`` decoded (by ``decoder``, else to plain JSON values); raises ``ValueError`` with a one-line reason
    when it is not JSON, does not fit the decoder's type, or nests deeper than ``limit``. Counting the brackets is
    a bound of the depth done in C, so only a body with more than ``limit`` of them is walked."""
    try:
        value = decoder.decode(body) if decoder is not None else msgspec.json.decode(body)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {limit} levels") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None
    if body.count(b"[") + body.count(b"{") > limit:
        plain = msgspec.to_builtins(value) if decoder is not None else value
        if nested_deeper_than(plain, limit):
            raise ValueError(f"JSON nested deeper than {limit} levels")
    return value


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


async def start_site(runner: web.AppRunner, *, host: str, port: int, sock: socket.socket | None,
                     ssl_context: ssl.SSLContext | None) -> int:
    """Serve ``runner`` on ``sock`` (a socket bound beforehand: the daemon's preflight, which turns a port that is
    taken into one line) or else on ``host:port``; returns the port bound (what 0 asked for)."""
    site: web.BaseSite = (web.SockSite(runner, sock, ssl_context=ssl_context) if sock is not None
                          else web.TCPSite(runner, host, port, ssl_context=ssl_context))
    await site.start()
    sockets = getattr(site._server, "sockets", None) or ()
    return int(sockets[0].getsockname()[1]) if sockets else port


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
        self.tls = ServingCertificate(cert_file, key_file, reload_interval=reload_interval)
        self.serving = serving
        self.host = host
        self.port = port
        self.observe = observe
        self._runner: web.AppRunner | None = None
        self._reloader: asyncio.Task[None] | None = None  # the certificate's watch (ServingCertificate.watch)

    # --- TLS -------------------------------------------------------------------------------------------------

    @property
    def cert_file(self) -> str:
        return self.tls.cert_file

    @property
    def key_file(self) -> str:
        return self.tls.key_file

    def reload_if_changed(self) -> bool:
        """Re-read the certificate when its files changed (cert-manager rotated them); True when it did."""
        return self.tls.reload_if_changed()

    # --- HTTP ------------------------------------------------------------------------------------------------

    async def start(self, *, sock: socket.socket | None = None) -> None:
        """Serve on ``sock`` when given (bound beforehand), else on ``host:port``."""
        app = web.Application(client_max_size=MAX_REVIEW_BYTES)
        for path in self.handlers:
            app.router.add_post(path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = await start_site(self._runner, host=self.host, port=self.port, sock=sock,
                                     ssl_context=self.tls.context())
        self._reloader = asyncio.create_task(self.tls.watch(), name="webhook-certificate")
        log.info("admission webhooks serving", port=self.port, paths=sorted(self.handlers))

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            with suppress(asyncio.CancelledError):
                await self._reloader
            self._reloader = None
        if self._runner is not None:
            with suppress(Exception):
                await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        path = request.match_info.route.resource.canonical if request.match_info.route.resource else request.path
        self.tls.maybe_reload()
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._done(path, "bad-request", started, web.Response(
                status=413, text=f"an AdmissionReview is at most {MAX_REVIEW_BYTES} bytes"))
        try:
            review: _Review = decode_bounded(body, decoder=_review_decoder)
        except ValueError as exc:
            return self._done(path, "bad-request", started,
                              web.Response(status=400, text=f"not an admission.k8s.io/v1 AdmissionReview: {exc}"))
        if review.request is None:
            return self._done(path, "bad-request", started,
                              web.Response(status=400, text="AdmissionReview without a request"))
        if (review.api_version, review.kind) != (ADMISSION_API_VERSION, "AdmissionReview") or not review.request.uid:
            what = f"{review.api_version or '(no apiVersion)'} {review.kind or '(no kind)'}"
            return self._done(path, "bad-request", started, web.Response(
                status=400, text=f"expected an admission.k8s.io/v1 AdmissionReview with a request.uid, got {what}"))
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

