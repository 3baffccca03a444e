"""Catalog resolvers: where does a claimed data source live?

A resolver turns a :class:`~tether.core.identity.DataIdentity` into one of the three lookup outcomes of
:mod:`tether.core.events` — :class:`DataLocationResolved`, :class:`DataSourceNotInCatalog` or
:class:`DataLocationLookupFailed` — and never raises for catalog trouble: a catalog being down is a fact to
log, not an exception to crash the executor with. The decider maps the location to clusters, not us, so that
history can be re-decided under another mapping.

Resolvers:

* :class:`IcebergRestResolver` — the Iceberg REST ``LoadTable`` call,
  ``GET {url}{basePath}/v1/{prefix}/namespaces/{ns}/tables/{table}``. Multi-level namespaces are joined with the
  unit separator (``%1F``) as the REST spec says. The data lives under ``metadata.location`` unless the table
  property ``write.data.path`` moves it elsewhere — the property wins, since that is where writers put files.
* :class:`AmoroResolver` — the same with Amoro's addressing (base ``/api/iceberg/rest``, prefix
  ``catalogs/{catalog}``, names ``catalog.db.table``) and its real health path ``/api/ams/v1/health/status``.
* :class:`PathResolver` — ``s3``, ``hdfs`` and the other path systems: the name *is* the location, no HTTP.

Outcome rules: 404 and 400 (Amoro's answer for a non-Iceberg catalog) mean "not in catalog"; 401/403 and
malformed names are non-retryable failures (a human must act); 429, 5xx, network errors and timeouts are
retried here with backoff (:mod:`tether.adapters.catalog.http`) and end as a *retryable* failure, which the
decider retries later on its own, slower schedule. A malformed 200 body is not retried here (the server did
answer; asking again at once rarely helps) but is reported as retryable, so fixing the server heals the claim.

Per endpoint (= per resolver; two systems pointing at one URL get two breakers, an accepted simplification)
there is a circuit breaker and a concurrency limit, and concurrent ``resolve()`` calls for one identity share
one request (single flight). The decider already keeps one lookup in flight per identity, but periodic
refreshes and pushed notifications come from elsewhere, and a resolver must be safe on its own.

Third-party resolvers plug in through :mod:`tether.adapters.catalog.registry`.
"""

from __future__ import annotations

import asyncio
import json
import random as _random
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

import aiohttp
import msgspec
import yarl

from tether.adapters.catalog.http import (
    MAX_RESPONSE_BYTES,
    Authenticator,
    CatalogHttpError,
    CircuitBreaker,
    CircuitOpenError,
    Clock,
    Random,
    ResponseTooLarge,
    Sleep,
    backoff_delay,
    make_ssl_context,
    parse_retry_after,
    read_capped,
)
from tether.core.events import DataLocationLookupFailed, DataLocationResolved, DataSourceNotInCatalog
from tether.core.identity import DataIdentity, identity_problem
from tether.core.plugin_config import PATH_SYSTEMS, PluginConfig

Outcome = DataLocationResolved | DataSourceNotInCatalog | DataLocationLookupFailed

ENTRY_POINT_GROUP = "tether.catalogs"
AMORO_BASE_PATH = "/api/iceberg/rest"
AMORO_PREFIX = "catalogs/{catalog}"
AMORO_HEALTH_PATH = "/api/ams/v1/health/status"
_DEFAULT_FS_SCHEMES = frozenset({"hdfs", "file"})
_NS_SEPARATOR = "%1F"  # the Iceberg REST spec's separator of namespace levels, already percent-encoded


@runtime_checkable
class CatalogResolver(Protocol):
    system: str

    async def resolve(self, identity: DataIdentity, *, trigger: str = "lookup") -> Outcome: ...

    async def aclose(self) -> None: ...


def _failed(identity: DataIdentity, message: str, *, retryable: bool) -> DataLocationLookupFailed:
    return DataLocationLookupFailed(identity=identity, message=message, retryable=retryable)


def _with_trigger(outcome: Outcome, trigger: str) -> Outcome:
    # Single-flight callers share one outcome but each keeps its own trigger (lookup / refresh / push).
    if isinstance(outcome, DataLocationResolved) and outcome.trigger != trigger:
        return msgspec.structs.replace(outcome, trigger=trigger)
    return outcome


class _SingleFlight:
    """Concurrent calls with one key share one task; the key is released when the task ends."""

    def __init__(self) -> None:
        self._tasks: dict[DataIdentity, asyncio.Task[Outcome]] = {}

    async def run(self, key: DataIdentity, make: Callable[[], Any]) -> Outcome:
        task = self._tasks.get(key)
        if task is None:
            task = asyncio.ensure_future(self._wrap(key, make))
            self._tasks[key] = task
        # shield: one caller being cancelled must not cancel the request the others are waiting for
        return await asyncio.shield(task)

    async def _wrap(self, key: DataIdentity, make: Callable[[], Any]) -> Outcome:
        try:
            result: Outcome = await make()
            return result
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)


class PathResolver:
    """Path systems (s3, hdfs, …): the claimed name already is the location. Never does I/O."""

    def __init__(self, plugin: PluginConfig, *, session: aiohttp.ClientSession | None = None, **_: Any) -> None:
        self.system = plugin.system
        self.scheme = plugin.type if plugin.type in PATH_SYSTEMS else plugin.system
        self.lookups = 0

    def location_of(self, name: str) -> str:
        """``s3://bucket//a/b`` → ``s3://bucket/a/b``; ``bucket/a`` → ``s3://bucket/a``. Raises ValueError."""
        scheme, sep, rest = name.strip().partition("://")
        if not sep:
            scheme, rest = self.scheme, name.strip()
            if self.scheme not in _DEFAULT_FS_SCHEMES:  # "/bucket/x" on s3 can only mean the bucket
                rest = rest.lstrip("/")
        scheme = scheme.lower()
        # s3a/s3n are Hadoop's names for the same buckets; anything else is a claim naming the wrong system
        if scheme != self.scheme and not (self.scheme == "s3" and scheme in {"s3a", "s3n"}):
            raise ValueError(f"location {name!r} has scheme {scheme!r} but the claim's system is {self.system!r}")
        authority, slash, path = rest.partition("/")
        path = "/".join(p for p in path.split("/") if p) + ("/" if path.endswith("/") else "")
        # an empty authority is hdfs's "default file system" (hdfs:///warehouse); object stores need a bucket
        if not authority and scheme not in _DEFAULT_FS_SCHEMES:
            raise ValueError(f"location {name!r} names no bucket/host; expected '{self.scheme}://bucket/path'")
        return f"{scheme}://{authority}{slash}{path}"

    async def resolve(self, identity: DataIdentity, *, trigger: str = "lookup") -> Outcome:
        self.lookups += 1
        try:
            return DataLocationResolved(identity=identity, location=self.location_of(identity.name), trigger=trigger)
        except ValueError as exc:
            return _failed(identity, str(exc), retryable=False)

    async def aclose(self) -> None:
        return None


class IcebergRestResolver:
    """An Iceberg REST catalog (module doc). Inject ``clock``/``sleep``/``random`` to make tests fast."""

    default_base_path = ""
    default_prefix = ""
    #: None: any depth of namespace; Amoro's databases are a single level.
    max_namespace_levels: int | None = None

    def __init__(
        self,
        plugin: PluginConfig,
        *,
        session: aiohttp.ClientSession | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        random: Random = _random.random,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.plugin = plugin
        self.max_response_bytes = max_response_bytes
        self.system = plugin.system
        self._base = plugin.url.rstrip("/") + _norm_path(plugin.base_path or self.default_base_path)
        self._prefix = (plugin.prefix or self.default_prefix).strip("/")
        self._session = session
        self._owns_session = session is None
        self._sleep = sleep
        self._random = random
        self._ssl: ssl.SSLContext | None = make_ssl_context(plugin.tls)
        token_url = plugin.auth.token_url or f"{self._base}/v1/oauth/tokens"
        if token_url.startswith("/"):
            token_url = plugin.url.rstrip("/") + token_url
        self.auth = Authenticator(plugin.auth, token_url=token_url, clock=clock)
        self.breaker = CircuitBreaker(plugin.circuit_breaker, name=plugin.url or self.system, clock=clock)
        self._limit = asyncio.Semaphore(plugin.concurrency)
        self._flights = _SingleFlight()
        self._closed = False

    # ---------------------------------------------------------------------------------------- addressing

    @property
    def expected_shape(self) -> str:
        if "{catalog}" not in self._prefix:
            return "namespace.table"
        return "catalog.db.table" if self.max_namespace_levels == 1 else "catalog.namespace.table"

    def table_url(self, name: str) -> str:
        """The LoadTable URL for a claim name; raises ValueError naming the expected shape."""
        parts = name.split(".")
        with_catalog = "{catalog}" in self._prefix
        need = 3 if with_catalog else 2
        levels = len(parts) - need + 1
        if (
            len(parts) < need
            or any(not p for p in parts)
            or (self.max_namespace_levels is not None and levels > self.max_namespace_levels)
        ):
            raise ValueError(
                f"dataSourceName {name!r} does not fit system {self.system!r}: expected {self.expected_shape!r}"
            )
        prefix = self._prefix
        if with_catalog:
            prefix = prefix.replace("{catalog}", quote(parts[0], safe=""))
            parts = parts[1:]
        namespace = _NS_SEPARATOR.join(quote(p, safe="") for p in parts[:-1])
        table = quote(parts[-1], safe="")
        return f"{self._base}/v1/{prefix + '/' if prefix else ''}namespaces/{namespace}/tables/{table}"

    # ------------------------------------------------------------------------------------------- resolve

    async def resolve(self, identity: DataIdentity, *, trigger: str = "lookup") -> Outcome:
        if self._closed:
            return _failed(identity, f"resolver for system {self.system!r} is closed", retryable=True)
        return _with_trigger(await self._flights.run(identity, lambda: self._lookup(identity)), trigger)

    async def _lookup(self, identity: DataIdentity) -> Outcome:
        problem = identity_problem(identity)
        if problem:
            return _failed(identity, problem, retryable=False)
        try:
            url = self.table_url(identity.name)
        except ValueError as exc:
            return _failed(identity, str(exc), retryable=False)
        try:
            return await self._with_retries(identity, url)
        except Exception as exc:  # "never raises": a bug here must not take the executor down
            return _failed(identity, f"unexpected error looking up {identity.name!r}: {exc!r}", retryable=True)

    async def _with_retries(self, identity: DataIdentity, url: str) -> Outcome:
        retry = self.plugin.retry
        last: CatalogHttpError | None = None
        for attempt in range(retry.max_retries + 1):
            async with self._limit:  # the slot is held per attempt, never across a backoff sleep
                try:
                    probe = self.breaker.before_request()
                except CircuitOpenError as exc:
                    suffix = f"; last error: {last.message}" if last else ""
                    return _failed(identity, exc.message + suffix, retryable=True)
                try:
                    outcome = await self._attempt(identity, url)
                except CatalogHttpError as exc:
                    if exc.retryable:
                        self.breaker.record_failure()
                    else:  # the server answered: it is alive, even if it said no
                        self.breaker.record_success()
                        return _failed(identity, exc.message, retryable=False)
                    last = exc
                except BaseException:  # cancelled: no evidence either way
                    if probe:
                        self.breaker.release_probe()
                    raise
                else:
                    self.breaker.record_success()
                    return outcome
            if attempt == retry.max_retries:
                break
            if last.retry_after is not None and last.retry_after > retry.max_backoff:
                return _failed(
                    identity,
                    f"{last.message}; the server asked to retry after {last.retry_after:.0f}s",
                    retryable=True,
                )
            delay = last.retry_after if last.retry_after is not None else backoff_delay(
                attempt, retry, random=self._random
            )
            await self._sleep(delay)
        assert last is not None
        return _failed(
            identity, f"{last.message} (gave up after {retry.max_retries + 1} attempts)", retryable=True
        )

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # created lazily: a ClientSession belongs to the running loop; timeouts are ours (asyncio.timeout)
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
            self._owns_session = True
        return self._session

    async def _attempt(self, identity: DataIdentity, url: str) -> Outcome:
        """One request (two if an OAuth2 token was revoked). Raises CatalogHttpError for failures."""
        session = self._get_session()
        timeout = self.plugin.retry.timeout
        try:
            async with asyncio.timeout(timeout):
                status, headers, body = await self._get(session, url)
                if status == 401 and self.auth.invalidate():
                    status, headers, body = await self._get(session, url)
        except TimeoutError:
            raise CatalogHttpError(f"GET {url} timed out after {timeout:g}s", retryable=True) from None
        except ResponseTooLarge as exc:
            # the server answered (it is alive), with something no LoadTableResponse is: not asked again at once,
            # but retryable on the decider's schedule, so fixing the server heals the claim (as a malformed body)
            return _failed(identity, f"catalog answered more than {exc.limit} bytes for {identity.name!r} (GET "
                           f"{url}); the answer was dropped — check url/basePath/prefix", retryable=True)
        except aiohttp.ClientConnectorCertificateError as exc:
            raise CatalogHttpError(f"TLS verification of {self.plugin.url} failed: {exc}", retryable=False) from None
        except aiohttp.ClientError as exc:
            raise CatalogHttpError(f"GET {url} failed: {exc.__class__.__name__}: {exc}", retryable=True) from None
        return self._classify(identity, url, status, headers, body)

    async def _get(self, session: aiohttp.ClientSession, url: str) -> tuple[int, Any, bytes]:
        headers = {"Accept": "application/json", **await self.auth.headers(session, ssl_ctx=self._ssl_arg())}
        # encoded=True: the path is already percent-encoded (%1F must reach the server as is)
        async with session.get(yarl.URL(url, encoded=True), headers=headers, ssl=self._ssl_arg()) as resp:
            return resp.status, resp.headers, await read_capped(resp, limit=self.max_response_bytes)

    def _ssl_arg(self) -> Any:
        return self._ssl if self._ssl is not None else True

    def _classify(self, identity: DataIdentity, url: str, status: int, headers: Any, body: bytes) -> Outcome:
        name = identity.name
        if status == 200:
            try:
                location = data_location(json.loads(body))
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # (RecursionError: nested too deep)
                snippet = body[:120].decode("utf-8", "replace")
                return _failed(
                    identity,
                    f"catalog returned a malformed LoadTableResponse for {name!r} ({exc}); body starts {snippet!r}"
                    f" — check url/basePath/prefix",
                    retryable=True,
                )
            return DataLocationResolved(identity=identity, location=location)
        message = _error_message(body)
        if status == 404:
            return DataSourceNotInCatalog(identity=identity, message=f"table {name!r} not found in catalog: {message}")
        if status == 400:
            return DataSourceNotInCatalog(identity=identity, message=f"catalog rejected {name!r}: {message}")
        if status in (401, 403):
            raise CatalogHttpError(
                f"catalog denied access ({status}) to {name!r} with auth type {self.auth.kind!r}: {message}",
                retryable=False,
            )
        if status == 429 or status >= 500:
            raise CatalogHttpError(
                f"GET {url} answered {status}: {message}",
                retryable=True,
                retry_after=parse_retry_after(headers.get("Retry-After")),
            )
        raise CatalogHttpError(f"GET {url} answered unexpected status {status}: {message}", retryable=False)

    # ------------------------------------------------------------------------------------------ the rest

    @property
    def health_url(self) -> str:
        """The generic Iceberg REST server has no health endpoint; its config endpoint is the cheapest call."""
        return f"{self._base}/v1/config"

    async def check_health(self) -> tuple[bool, str]:
        """(healthy, detail) from the catalog's health endpoint; goes around breaker and retries."""
        url = self.health_url
        try:
            session = self._get_session()
            async with asyncio.timeout(self.plugin.retry.timeout):
                headers = await self.auth.headers(session, ssl_ctx=self._ssl_arg())
                async with session.get(url, headers=headers, ssl=self._ssl_arg()) as resp:
                    text = (await read_capped(resp, limit=1024 * 1024)).decode("utf-8", "replace")
                    return resp.status == 200, f"{resp.status} {text[:200]}"
        except (TimeoutError, aiohttp.ClientError, CatalogHttpError, ResponseTooLarge) as exc:
            return False, f"{url}: {exc.__class__.__name__}: {exc}"

    async def aclose(self) -> None:
        """Refuse new lookups, let those in flight finish, then close the session if we made it."""
        self._closed = True
        await self._flights.drain()
        if self._owns_session and self._session is not None:
            await self._session.close()


class AmoroResolver(IcebergRestResolver):
    """Amoro's Iceberg REST endpoint: names are ``catalog.db.table``."""

    default_base_path = AMORO_BASE_PATH
    default_prefix = AMORO_PREFIX
    max_namespace_levels = 1

    @property
    def health_url(self) -> str:
        return self.plugin.url.rstrip("/") + AMORO_HEALTH_PATH  # not VG's /api/v1/health: Amoro has no such path


#: The longest location taken from a catalog: it goes into events, the DataSource and the claim's conditions.
MAX_LOCATION_LENGTH = 4096


def data_location(doc: Any) -> str:
    """The data location in a LoadTableResponse: ``write.data.path`` if set, else ``metadata.location``. Raises
    ValueError saying what is wrong with a body of the wrong shape or types."""
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        raise ValueError(f"no 'metadata' object (the body is {_shape(doc)})")
    metadata = doc["metadata"]
    properties = metadata.get("properties") or {}
    if not isinstance(properties, dict):
        raise ValueError(f"'metadata.properties' is not an object but {_shape(properties)}")
    override = properties.get("write.data.path")
    location = override if isinstance(override, str) and override else metadata.get("location")
    if location is None or location == "":
        raise ValueError("'metadata.location' missing")
    if not isinstance(location, str):
        raise ValueError(f"'metadata.location' is not a string but {_shape(location)}")
    if len(location) > MAX_LOCATION_LENGTH:
        raise ValueError(f"the location is {len(location)} characters long (at most {MAX_LOCATION_LENGTH})")
    return location


def _shape(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _error_message(body: bytes) -> str:
    """The message of an Iceberg REST ``{"error": {"message", "type", "code"}}`` body, or the start of the raw
    text (an HTML page from a proxy, a plain-text 502, a JSON body of another shape) — bounded either way."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # (UnicodeDecodeError included; a body nested too deep)
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and err.get("message") is not None:
        return f"{err.get('type') or 'Error'}: {err['message']}"[:500]
    return body[:200].decode("utf-8", "replace").strip() or "(empty body)"


def _norm_path(path: str) -> str:
    path = path.strip("/")
    return "/" + path if path else ""
