"""The HTTP machinery under the catalog resolvers: retry policy, circuit breaker, authentication, TLS.

Nothing here knows about Iceberg; :mod:`tether.adapters.catalog.iceberg_rest` builds the protocol on top. The pieces
are small, separately testable and deterministic: every one that waits or reads the time takes the clock, the
sleep and the random source as keyword-only arguments, so the tests run a whole backoff schedule in
microseconds and assert on the exact delays.

Design choices and their trade-offs:

* **Backoff is exponential with full jitter** (``uniform(0, min(max, initial * multiplier**n))``), the AWS
  recommendation: many controllers retrying the same unhealthy catalog spread out instead of arriving in
  waves. The price is that a single retry may come almost immediately; the breaker covers that case.
* **Retry-After is honoured** when the server sends it (429/503), *instead of* the jittered delay — the server
  knows better. A Retry-After longer than ``max_backoff`` ends the retries at once with a retryable failure:
  holding a concurrency slot for minutes would starve other tables, and the decider re-asks later anyway.
* **The breaker counts attempts, not lookups**: a catalog that times out three times in one lookup is three
  pieces of evidence. Answers that prove the server is alive (2xx, 4xx) reset it, since a 404 is a healthy
  catalog saying no. While open, lookups fail fast (no HTTP); after ``reset_timeout`` exactly one probe goes
  through (half-open), and its outcome closes or re-opens the breaker.
* **Every answer is bounded in size and time.** A body is read in chunks and the read stops past
  :data:`MAX_RESPONSE_BYTES` (:func:`read_capped`, :class:`ResponseTooLarge`); the whole attempt, body included,
  runs under ``retryConfig.timeout``. A catalog (or a proxy in front of it) that answers a huge body or a stream
  that never ends costs at most that much memory and that much time, and the claim says so in its condition.
* **OAuth2 tokens are cached** until shortly before ``expires_in`` (10 % of the lifetime, at most 60 s,
  early) and fetched under a lock so that a burst of lookups costs one token request. A 401 on a cached token
  invalidates it and the request is repeated once with a fresh one: servers revoke tokens before expiry.
* **Secrets by reference** (``tokenFile``, ``passwordEnv`` …, ``core/plugin_config.py``) are read
  when a request is built: a rotated Secret is used from the next request on. A file is re-read only when its
  modification time changes. One that cannot be read, or an environment variable that is not set, fails the
  request as retryable (the mount may still be coming), naming the file or the variable — never the secret.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import os
import random as _random
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from tether.core.plugin_config import AuthConfig, CircuitBreakerConfig, RetryConfig, TlsConfig

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
Random = Callable[[], float]


class CatalogHttpError(Exception):
    """A failure of one request; ``retryable`` says whether another attempt may succeed."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


# ---------------------------------------------------------------------------------------- bounded read

#: The most a catalog answer may weigh. An Iceberg LoadTableResponse carries the table's metadata (schemas,
#: snapshots), a few MB for a table with a long history; 32 MiB leaves room for that and bounds what one lookup
#: can hold in memory (there are ``concurrency`` of them at once per catalog).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024


class ResponseTooLarge(Exception):
    """A body longer than the cap: the read stopped there, the connection is dropped."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is larger than {limit} bytes")
        self.limit = limit


async def read_capped(resp: aiohttp.ClientResponse, *, limit: int = MAX_RESPONSE_BYTES) -> bytes:
    """The body of ``resp``, read in chunks; raises :class:`ResponseTooLarge` past ``limit`` bytes (at once when
    the Content-Length says so), without holding more than ``limit`` plus one chunk."""
    declared = resp.content_length
    if declared is not None and declared > limit:
        resp.close()
        raise ResponseTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            resp.close()  # the rest is never read: drop the connection rather than drain it
            raise ResponseTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------------------------- backoff


def backoff_delay(attempt: int, retry: RetryConfig, *, random: Random = _random.random) -> float:
    """Full-jitter delay before retry number ``attempt`` (0-based)."""
    cap = min(retry.max_backoff, retry.initial_backoff * retry.backoff_multiplier**attempt)
    return max(0.0, cap * random())


def parse_retry_after(value: str | None, *, now: Callable[[], float] = time.time) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


# ----------------------------------------------------------------------------------------- the breaker


class CircuitOpenError(CatalogHttpError):
    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class CircuitBreaker:
    """closed → open after ``failure_threshold`` consecutive failures → half-open after ``reset_timeout``."""

    def __init__(self, config: CircuitBreakerConfig, *, name: str = "", clock: Clock = time.monotonic) -> None:
        self._config = config
        self._name = name
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> str:
        if self._opened_at is None:
            return "closed"
        if self._probing or self._clock() - self._opened_at >= self._config.reset_timeout:
            return "half-open"
        return "open"

    def before_request(self) -> bool:
        """Raise :class:`CircuitOpenError` unless a request may go out now (the caller must then report).

        Returns True when this request is the half-open probe."""
        if self._opened_at is None:
            return False
        waited = self._clock() - self._opened_at
        if waited < self._config.reset_timeout:
            raise CircuitOpenError(
                f"circuit open for {self._name or 'the catalog'} after {self._failures} consecutive failures; "
                f"next probe in {self._config.reset_timeout - waited:.1f}s"
            )
        if self._probing:  # one probe at a time: the others fail fast until it reports
            raise CircuitOpenError(f"circuit half-open for {self._name or 'the catalog'}: a probe is in flight")
        self._probing = True
        return True

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probing = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._probing or self._failures >= max(1, self._config.failure_threshold):
            self._opened_at = self._clock()
        self._probing = False

    def release_probe(self) -> None:
        """The probe ended without evidence (cancelled): let the next request probe instead."""
        self._probing = False


# ------------------------------------------------------------------------------------------------- TLS


def make_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """None means aiohttp's default verification; a context when the plugin configures anything."""
    if not (tls.insecure_skip_verify or tls.ca_file or tls.cert_file):
        return None
    ctx = ssl.create_default_context(cafile=tls.ca_file or None)
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file or None)
    if tls.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


# ------------------------------------------------------------------------------------------------ auth


class Authenticator:
    """Adds credentials to requests; for OAuth2 also owns the cached token."""

    def __init__(self, auth: AuthConfig, *, token_url: str, clock: Clock = time.monotonic) -> None:
        self._auth = auth
        self._token_url = token_url
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self._files: dict[str, tuple[float, str]] = {}  # path → (mtime, content) of secrets given by file
        self.token_requests = 0  # observable for tests and metrics

    @property
    def kind(self) -> str:
        return self._auth.type

    def _secret(self, inline: str, file: str, env: str, *, name: str) -> str:
        """A secret given inline, by file or by environment variable (module doc)."""
        if env:
            value = os.environ.get(env)
            if value is None:
                raise CatalogHttpError(f"endpoint.auth.{name}Env: ${env} is not set", retryable=True)
            return value.strip()
        if not file:
            return inline
        try:
            mtime = os.stat(file).st_mtime
            held = self._files.get(file)
            if held is None or held[0] != mtime:
                with open(file, encoding="utf-8") as f:  # (a few bytes, and only when it changed)
                    held = self._files[file] = (mtime, f.read().strip())
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise CatalogHttpError(f"endpoint.auth.{name}File {file}: cannot read it ({why})", retryable=True) from None
        return held[1]

    async def headers(self, session: aiohttp.ClientSession, *, ssl_ctx: Any) -> dict[str, str]:
        a = self._auth
        match a.type:
            case "basic":
                password = self._secret(a.password, a.password_file, a.password_env, name="password")
                raw = f"{a.username}:{password}".encode()
                return {"Authorization": "Basic " + base64.b64encode(raw).decode()}
            case "bearer":
                return {"Authorization": f"Bearer {self._secret(a.token, a.token_file, a.token_env, name='token')}"}
            case "apikey":
                header = a.header or a.extra.get("header") or "X-API-Key"
                token = self._secret(a.token, a.token_file, a.token_env, name="token")
                return {header: token or a.extra.get("key", "")}
            case "oauth2":
                return {"Authorization": f"Bearer {await self._oauth2_token(session, ssl_ctx=ssl_ctx)}"}
        return {}

    def invalidate(self) -> bool:
        """Forget a cached token (after a 401); True when there was one, i.e. a retry may help."""
        if self._auth.type != "oauth2" or self._token is None:
            return False
        self._token = None
        return True

    async def _oauth2_token(self, session: aiohttp.ClientSession, *, ssl_ctx: Any) -> str:
        async with self._lock:  # a burst of lookups waits for one token request
            if self._token is not None and self._clock() < self._expires_at:
                return self._token
            a = self._auth
            secret = self._secret(a.client_secret, a.client_secret_file, a.client_secret_env, name="clientSecret")
            form = {"grant_type": "client_credentials", "client_id": a.client_id, "client_secret": secret}
            if a.scope:
                form["scope"] = a.scope
            self.token_requests += 1
            try:
                async with session.post(self._token_url, data=form, ssl=ssl_ctx) as resp:
                    try:
                        raw = await read_capped(resp, limit=64 * 1024)  # a token answer is a few hundred bytes
                    except ResponseTooLarge:
                        raise CatalogHttpError(f"OAuth2 token endpoint {self._token_url} answered more than 64 KiB",
                                               retryable=True) from None
                    text = raw.decode("utf-8", "replace")
                    if resp.status >= 500 or resp.status == 429:
                        raise CatalogHttpError(
                            f"OAuth2 token endpoint {self._token_url} answered {resp.status}",
                            retryable=True,
                            retry_after=parse_retry_after(resp.headers.get("Retry-After")),
                        )
                    if resp.status != 200:
                        raise CatalogHttpError(
                            f"OAuth2 token request to {self._token_url} was rejected ({resp.status}): "
                            f"{text[:200]} — check clientId/clientSecret/scope",
                            retryable=False,
                        )
                    try:
                        body = json.loads(raw)
                        token = body["access_token"]
                        expires_in = float(body.get("expires_in", 3600))
                    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
                        raise CatalogHttpError(
                            f"OAuth2 token endpoint {self._token_url} returned no access_token", retryable=True
                        ) from None
            except aiohttp.ClientError as exc:
                raise CatalogHttpError(
                    f"OAuth2 token endpoint {self._token_url} unreachable: {exc}", retryable=True
                ) from None
            self._token = str(token)
            self._expires_at = self._clock() + expires_in - min(60.0, expires_in * 0.1)
            return self._token
