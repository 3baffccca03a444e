"""A thin JSON client for the Kubernetes API on top of kubernetes-asyncio's ApiClient.

kubernetes-asyncio brings what is hard to get right — kubeconfig and in-cluster configuration, token refresh,
client certificates, TLS — and model classes tether does not want: custom resources are dicts anyway, and
deserialising ResourceBindings into generated classes only to turn them back into dicts costs time on every
event. :class:`KubeClient` therefore calls ``ApiClient.call_api`` with ``_preload_content=False`` and decodes the
raw body with msgspec. Errors become :class:`KubeError` carrying the API's ``Status`` (code, reason, message).

**The status comes first, the body second.** Not every error answer is a ``Status``. A real API server answers a
request for an API group it does not serve at all — or for a resource or version a CRD group lacks (a CRD that is
not installed) — from its last handler: ``404``, ``Content-Type: text/plain``, the body ``404 page not found``.
(Within a built-in group, such as ``apps`` or the core group, a missing resource or version is a ``Status``
NotFound that names no object: "the server could not find the requested resource".) Proxies and load balancers in
front of the server answer with text or HTML of their own. So the client looks at the status code first and
decodes a body as JSON only when it says it is JSON: a non-JSON error answer is a :class:`KubeError` of its status
with the text as its message, never a decoding error — which used to hide a 404 from everything that handles one
(``absent_ok`` watches, ``get``/``delete``) and made an absent optional resource retry for ever.
**Retry-After is kept.** A 429 (API priority and fairness) or a 5xx may carry ``Retry-After`` (and a Status its
``details.retryAfterSeconds``); :attr:`KubeError.retry_after` holds it, and whoever retries (the executor, the
watches) waits at least that long — asking again sooner is what the server just refused.
``KubeError.not_served`` tells a 404 that names no object (the API is not served) from a ``Status`` NotFound of a
served resource's missing object. A 2xx answer whose body is not JSON is a :class:`KubeError` too (status 0,
retryable: a broken proxy, not an answer of the API).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import msgspec
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from kubernetes_asyncio import client
from yarl import URL


@dataclass(frozen=True)
class Resource:
    """An API resource: where it is served and what it is called. ``served_group``: the group it is served from
    when not its own (:func:`served_from`); its objects keep their own ``api_version`` in tether."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    served_group: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def optional(self) -> bool:
        """Whether a server may lack this API: every group that is not built into kube-apiserver (a CRD's —
        Volcano's, Godel's, Fluid's, Karmada's — may be absent, installed later, or deleted)."""
        return (self.served_group or self.group) not in BUILT_IN_GROUPS

    def path(self, *, namespace: str = "", name: str = "", subresource: str = "") -> str:
        group = self.served_group or self.group
        base = f"/apis/{group}/{self.version}" if group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


# The API groups every kube-apiserver serves (of those tether reads): never optional.
BUILT_IN_GROUPS = frozenset({"", "apps", "batch", "coordination.k8s.io", "scheduling.k8s.io", "events.k8s.io",
                             "apiextensions.k8s.io", "admissionregistration.k8s.io"})


def served_from(res: Resource, groups: Mapping[str, str]) -> Resource:
    """``res`` served from the group ``groups`` names for its own, if any. A seam for tests on a shared cluster:
    the real CRDs of an optional API may be installed there and may not be deleted, so a test serves the API from
    a group of its own (a CRD it creates and deletes) and tether watches it there as if it were the real one."""
    served = groups.get(res.group, "")
    return replace(res, served_group=served) if served and served != res.group else res


CLAIMS = Resource("datadependency.volcano.sh", "v1alpha1", "datasourceclaims", "DataSourceClaim", True)
DATASOURCES = Resource("datadependency.volcano.sh", "v1alpha1", "datasources", "DataSource", False)
BINDINGS = Resource("work.karmada.io", "v1alpha2", "resourcebindings", "ResourceBinding", True)
CLUSTERS = Resource("cluster.karmada.io", "v1alpha1", "clusters", "Cluster", False)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
EVENTS = Resource("", "v1", "events", "Event", True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)

QUEUES = Resource("scheduling.volcano.sh", "v1beta1", "queues", "Queue", False)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
VOLCANO_JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job", True)  # (not in BY_KIND: watched only)

BY_KIND = {r.kind: r for r in (CLAIMS, DATASOURCES, BINDINGS, CLUSTERS, CONFIGMAPS, EVENTS, LEASES, QUEUES)}

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """A non-2xx answer of the API server (or a transport failure: status 0). ``not_served``: a 404 that names no
    object — the server does not serve that API (module doc) — as opposed to a served resource's missing object."""

    def __init__(self, status: int, reason: str, message: str, *, not_served: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.not_served = not_served
        self.retry_after = retry_after  # seconds the server asked to wait before asking again (module doc)

    @property
    def retryable(self) -> bool:
        return self.status in (0, 409, 429) or self.status >= 500


_decoder = msgspec.json.Decoder()
# Kubernetes' StatusReason for the codes a non-Status answer may carry (the HTTP phrase otherwise).
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
            406: "NotAcceptable", 409: "Conflict", 410: "Expired", 413: "RequestEntityTooLarge",
            415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}


def _is_json(content_type: str) -> bool:
    """``application/json`` and its relatives (``…+json``, parameters); an empty type is taken for JSON, as
    kubernetes-asyncio does."""
    media = content_type.split(";", 1)[0].strip().lower()
    return not media or media == "application/json" or media.endswith("+json")


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the API server sends delta-seconds); None when absent or not a number."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def error_of(status: int, content_type: str, body: bytes, *, phrase: str = "",
             retry_after: float | None = None) -> KubeError:
    """The :class:`KubeError` of a non-2xx answer: from its ``Status`` when the body is one, else from the status
    code with the body's text (module doc). ``retry_after``: the answer's Retry-After header, if any."""
    text = body.decode(errors="replace").strip()[:500]
    if _is_json(content_type) and body:
        try:
            decoded = _decoder.decode(body)
        except msgspec.DecodeError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            details = decoded.get("details")
            names_object = isinstance(details, dict) and bool(details.get("name"))
            if retry_after is None and isinstance(details, dict):
                seconds = details.get("retryAfterSeconds")
                retry_after = float(seconds) if isinstance(seconds, int | float) and seconds >= 0 else None
            return KubeError(status, str(decoded.get("reason") or _REASONS.get(status, phrase or "Error")),
                             str(decoded.get("message") or text), not_served=status == 404 and not names_object,
                             retry_after=retry_after)
    return KubeError(status, _REASONS.get(status, phrase or "Error"), text or phrase or f"HTTP {status}",
                     not_served=status == 404, retry_after=retry_after)


def stop_per_request_env_lookups(api_client: client.ApiClient) -> bool:
    """Look up once what kubernetes-asyncio's session would look up on every request; True if it stops.

    kubernetes-asyncio builds its aiohttp session with ``trust_env=True``, so aiohttp looks for a proxy in the
    environment and for ``~/.netrc`` credentials on **every** request, each in a thread of the default executor:
    two thread round trips per request — measured on loopback, half of a PATCH's latency (0.75 → 0.35 ms) and
    over a third of its CPU. Both answers depend only on the environment and the API server's host, which do not
    change while the process runs. So they are looked up here, once: when neither a proxy from the environment
    nor a netrc entry applies to the API server, the session stops looking (requests then go exactly as they
    did); when one applies, nothing changes. A proxy set in the kubeconfig is passed with each request and is
    not affected either way."""
    session = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
    if session is None or not getattr(session, "_trust_env", False):
        return False
    url = URL(api_client.configuration.host)
    try:
        get_env_proxy_for_url(url)
        return False  # the environment names a proxy for the API server: keep asking per request
    except LookupError:
        pass
    try:
        basicauth_from_netrc(netrc_from_env(), url.host or "")
        return False  # ~/.netrc has credentials for it
    except LookupError:
        pass
    session._trust_env = False
    return True


class KubeClient:
    """JSON verbs over one kubernetes-asyncio ApiClient."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self.api = api_client
        self.request_timeout = request_timeout
        stop_per_request_env_lookups(api_client)

    async def _call(
        self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        try:
            response = await self.api.call_api(
                path, method, query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
                header_params={"Content-Type": content_type, "Accept": "application/json"}, body=body,
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except client.ApiException as exc:
            raise KubeError(exc.status or 0, str(exc.reason or "Error"), str(exc.body or exc)) from exc
        except (OSError, TimeoutError) as exc:
            raise KubeError(0, "Unavailable", f"{method} {path}: {exc!r}") from exc
        try:
            data = await response.read()
        finally:
            response.release()
        status, content_type = response.status, response.headers.get("Content-Type", "")
        if not 200 <= status < 300:  # the status first: an error body need not be JSON (module doc)
            raise error_of(status, content_type, data, phrase=str(response.reason or ""),
                           retry_after=parse_retry_after(response.headers.get("Retry-After")))
        if not data:
            return None
        try:
            return _decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise KubeError(0, "InvalidResponse", f"{method} {path}: {status} answer is not JSON "
                            f"({content_type or 'no Content-Type'}): {data[:200].decode(errors='replace')!r}"
                            ) from exc

    async def get(self, res: Resource, name: str, *, namespace: str = "") -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._call("GET", res.path(namespace=namespace, name=name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return result

    async def list(
        self, res: Resource, *, namespace: str = "", label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """All items (following ``continue``) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = await self._call("GET", res.path(namespace=namespace), query={
                "labelSelector": label_selector, "fieldSelector": field_selector, "limit": 500, "continue": token})
            for item in page.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return items, str(meta.get("resourceVersion", ""))

    async def watch(
        self, res: Resource, *, resource_version: str, namespace: str = "", field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[dict[str, Any]]:
        """Raw watch events ``{"type", "object"}`` until the server ends the stream."""
        try:
            response = await self.api.call_api(
                res.path(namespace=namespace), "GET",
                query_params=[(k, v) for k, v in {
                    "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                    "timeoutSeconds": timeout_seconds, "fieldSelector": field_selector}.items() if v is not None],
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=timeout_seconds + 30,
            )
        except client.ApiException as exc:
            raise KubeError(exc.status or 0, str(exc.reason or "Error"), str(exc.body or exc)) from exc
        except (OSError, TimeoutError) as exc:
            raise KubeError(0, "Unavailable", f"watch {res.plural}: {exc!r}") from exc
        try:
            if response.status != 200:
                raise error_of(response.status, response.headers.get("Content-Type", ""), await response.read(),
                               phrase=str(response.reason or ""),
                               retry_after=parse_retry_after(response.headers.get("Retry-After")))
            async for line in response.content:
                if line.strip():
                    yield _decoder.decode(line)
        finally:
            response.release()

    async def served(self, group: str, version: str) -> set[str]:
        """The resources (plurals) the server serves in ``group/version``, from discovery; empty when it serves
        none (the group version is not there: 404)."""
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            found = await self._call("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return set()
            raise
        return {str(r.get("name")) for r in (found or {}).get("resources") or [] if isinstance(r, dict)}

    async def create(self, res: Resource, body: dict[str, Any], *, namespace: str = "") -> dict[str, Any]:
        result: dict[str, Any] = await self._call("POST", res.path(namespace=namespace), body=body)
        return result

    async def patch(
        self, res: Resource, name: str, body: Any, *, namespace: str = "", subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(
            "PATCH", res.path(namespace=namespace, name=name, subresource=subresource), body=body,
            content_type=content_type)
        return result

    async def replace(self, res: Resource, name: str, body: dict[str, Any], *, namespace: str = "") -> dict[str, Any]:
        result: dict[str, Any] = await self._call("PUT", res.path(namespace=namespace, name=name), body=body)
        return result

    async def delete(self, res: Resource, name: str, *, namespace: str = "", uid: str = "") -> dict[str, Any] | None:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            result: dict[str, Any] = await self._call("DELETE", res.path(namespace=namespace, name=name), body=body)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return result


def merge_patch(before: Any, after: Any) -> Any:
    """The RFC 7386 merge patch that turns ``before`` into ``after`` (nulls for removed keys, lists whole)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return after
    patch: dict[str, Any] = {}
    for key in before.keys() - after.keys():
        patch[key] = None
    for key, value in after.items():
        if key not in before:
            patch[key] = value
        elif before[key] != value:
            patch[key] = merge_patch(before[key], value)
    return patch
