"""The HTTP face of the emulator: Kubernetes REST paths, discovery and watch streams over aiohttp.

One catch-all route parses ``/api/v1/...`` and ``/apis/{group}/{version}/...`` itself (namespaced or not, object,
subresource, legacy ``/watch/`` prefix), because the set of resources changes at runtime as CRDs come and go.
Errors are ``Status`` bodies, except a request for an API that is not served outside the built-in groups (a group
nobody serves, a resource or version a CRD group lacks): that is the real server's plain-text ``404 page not
found`` (:class:`~.errors.NotServed` says which shape when). Lists omit ``kind``/``apiVersion`` on items of
built-in kinds (like the real server) and carry ``metadata.resourceVersion``; ``limit``/``continue`` page in
(namespace, name) order. Watches are newline-delimited JSON over a chunked 200 response; see :mod:`.watch` for the
semantics.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from tether.core.integers import decimal_digits, parse_int64

from . import errors, openapi, patch, tables
from .errors import ApiError, NotServed
from .metrics import request_labels, request_total_text
from .resources import ResourceType
from .selectors import parse_field_selector, parse_label_selector

if TYPE_CHECKING:
    from . import KubeEmulator

log = logging.getLogger(__name__)
# The verbs that write: they wait for the write cost's group commit and are counted in ``api_writes``
# (deletecollection is not served: 405, free).
_WRITES = frozenset({"create", "update", "patch", "delete"})
_JSON = "application/json"
#: Where a resource request keeps its apiserver_request_total labels until its answer's code is known.
_METRIC_LABELS = web.RequestKey("request_labels", tuple)
_ENC = msgspec.json.Encoder()
_DEC = msgspec.json.Decoder()
K8S_VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.0-tether-emulator", "gitCommit": "",
               "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.22",
               "compiler": "gc", "platform": "linux/amd64"}


def _resp(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=_ENC.encode(body), status=status, content_type=_JSON, headers=headers)


def _limit(text: str) -> int:
    """A list's ``limit`` as a real server reads it (strconv.ParseInt); zero or less asks for no limit."""
    if not text:
        return 0
    value = parse_int64(text)
    if value is None:
        raise errors.limit_not_an_integer(text)
    return value


def _resource_version(text: str) -> int:
    """A list's or watch's ``resourceVersion`` as a real server reads it (strconv.ParseUint); 0 when unset."""
    if not text:
        return 0
    value = decimal_digits(text)
    if value is None or value >= 2**64:
        raise errors.resource_version_not_a_number(text)
    return value


def _error(e: ApiError) -> web.Response:
    return _resp(e.status(), e.code, e.headers)


def _not_found() -> ApiError:
    return ApiError(code=404, reason="NotFound", message="the server could not find the requested resource")


def _not_served() -> web.Response:
    """What the real apiserver's last handler answers for a path it does not serve (``errors.NotServed``)."""
    return web.Response(text=errors.NOT_SERVED_BODY, status=404, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


def _out(rt: ResourceType, version: str, obj: dict[str, Any]) -> dict[str, Any]:
    av = rt.api_version(version)
    return obj if obj.get("apiVersion") == av else {**obj, "apiVersion": av}


class Server:
    def __init__(self, emulator: KubeEmulator) -> None:
        self.emu = emulator
        self.store = emulator.store
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("POST", "/_emulator/faults", self.admin_faults)
        self.app.router.add_route("GET", "/_emulator/commit-times", self.admin_commit_times)
        self.app.router.add_route("GET", "/_emulator/writes", self.admin_writes)
        self.app.router.add_route("GET", "/_emulator/requests", self.admin_requests)
        self.app.router.add_route("GET", "/metrics", self.metrics)
        openapi.register(self.app, self.store, respond=_resp)  # /openapi/v3 (kubectl's validation): openapi.py
        self.app.router.add_route("*", "/{tail:.*}", self.dispatch)

    # -- discovery ----------------------------------------------------------------------------------------------
    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = []
        for rt in sorted(self.store.by_gv.get((group, version), {}).values(), key=lambda r: r.plural):
            entry: dict[str, Any] = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                                     "kind": rt.kind, "verbs": rt.verbs()}
            if rt.short_names:
                entry["shortNames"] = rt.short_names
            if rt.categories:
                entry["categories"] = rt.categories
            resources.append(entry)
            if rt.status_subresource:
                resources.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                                  "kind": rt.kind, "verbs": ["get", "patch", "update"]})
            for sub in rt.extra_subresources:
                resources.append({"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                                  "kind": "Binding", "verbs": ["create"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}

    def _group(self, group: str) -> dict[str, Any] | None:
        versions: list[str] = []
        for rt in self.store.types.values():
            if rt.group == group:
                versions.extend(v for v in rt.versions if v not in versions)
        if not versions:
            return None
        preferred = next((rt.versions[0] for rt in self.store.types.values() if rt.group == group), versions[0])
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": gvs,
                "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred}}

    def _discovery(self, parts: list[str]) -> web.Response | None:
        if parts == ["api"]:
            return _resp({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.emu.host}:{self.emu.port}"}]})
        if parts == ["api", "v1"]:
            return _resp(self._resource_list("", "v1"))
        if parts == ["apis"]:
            groups = sorted({rt.group for rt in self.store.types.values() if rt.group})
            return _resp({"kind": "APIGroupList", "apiVersion": "v1",
                          "groups": [g for g in (self._group(n) for n in groups) if g]})
        if len(parts) == 2 and parts[0] == "apis":
            g = self._group(parts[1])
            if g is None:
                raise NotServed(builtin_group=False)
            return _resp({"kind": "APIGroup", "apiVersion": "v1", **g})
        if len(parts) == 3 and parts[0] == "apis":
            if (parts[1], parts[2]) not in self.store.by_gv:
                raise NotServed(builtin_group=self._builtin_group(parts[1]))
            return _resp(self._resource_list(parts[1], parts[2]))
        if parts == ["version"]:
            return _resp(K8S_VERSION)
        if parts and parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        return None

    def _builtin_group(self, group: str) -> bool:
        """Whether the server's own routes own ``/apis/<group>`` (``/api`` for the core group): errors.NotServed."""
        return any(rt.builtin and rt.group == group for rt in self.store.types.values())

    # -- dispatch -----------------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        response = await self._dispatch(request)
        labels = request.get(_METRIC_LABELS)
        if labels is not None:  # a resource request: counted as apiserver_request_total counts it (metrics.py)
            self.emu.requests_total[(*labels, str(response.status))] += 1
        return response

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        try:
            disc = self._discovery(parts) if request.method == "GET" else None
            if disc is not None:
                return disc
            return await self._resource_request(request, parts)
        except NotServed as e:
            return _error(errors.not_served_in_builtin_group()) if e.builtin_group else _not_served()
        except ApiError as e:
            return _error(e)
        except (msgspec.DecodeError, ValueError) as e:
            return _error(errors.bad_request(str(e)))
        except Exception as e:  # a bug here must still look like an apiserver error to the client
            log.exception("emulator failed on %s %s", request.method, request.path)
            return _error(errors.internal(f"{type(e).__name__}: {e}"))

    async def metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: ``apiserver_request_total`` as kube-apiserver exposes it (metrics.py)."""
        return web.Response(text=request_total_text(self.emu.requests_total),
                            content_type="text/plain", charset="utf-8")

    async def _resource_request(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise NotServed(builtin_group=bool(parts) and parts[0] == "api")
        not_served = NotServed(builtin_group=self._builtin_group(group))
        q = request.query
        watch = q.get("watch") in ("1", "true", "True")
        if rest and rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise not_served
        plural, name = rest[0], rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else None
        rt = self.store.lookup(group, version, plural)
        if rt is None or (namespace and not rt.namespaced):
            raise not_served
        if sub is not None and not ((sub == "status" and rt.status_subresource) or sub in rt.extra_subresources):
            if not rt.builtin:  # the CRD handler answers any other subresource with its object's NotFound
                raise errors.not_found(resource=rt.plural, group=rt.group, name=name)
            raise not_served
        if rt.namespaced and name and not namespace:
            raise not_served
        method = request.method
        verb = {"GET": "get" if name else ("watch" if watch else "list"), "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}.get(method, "")
        request[_METRIC_LABELS] = request_labels(
            method, verb, group=rt.group, version=version, resource=plural, subresource=sub or "",
            scope="resource" if name else ("namespace" if namespace else "cluster"),
            content_type=request.headers.get("Content-Type", ""), dry_run=q.get("dryRun", ""))
        await self.emu.faults.before(verb=verb, resource=plural, subresource=sub, namespace=namespace, name=name)
        dry_run = q.get("dryRun") == "All"
        table_api = tables.table_version(request.headers.get("Accept", "")) if tables.printed(rt) else None
        if table_api is not None:
            tables.check_include_object(q.get("includeObject", ""))
        if verb == "get":
            obj = _out(rt, version, self.store.get(rt, namespace, name))
            if table_api is not None:  # kubectl get's server-side printing (tables.py)
                return _resp(tables.object_table(rt, version, obj, table_api=table_api,
                                                 include_object=q.get("includeObject", "")))
            return _resp(obj)
        if verb == "list":
            return self._list(rt, version, namespace, q, table_api=table_api)
        if verb == "watch":
            return await self._watch(request, rt, version, namespace, q, table_api=table_api)
        if verb not in _WRITES:
            raise errors.method_not_allowed()
        await openapi.strict_unknown_fields(request, rt, version, verb)  # ?fieldValidation=Strict (openapi.py)
        if not dry_run and self.emu.group_commit is not None:
            await self.emu.group_commit.write()  # visible (answer, watch event) once its commit ended
        resp = await self._write(request, rt, version, namespace, name, sub, verb, q, dry_run)
        if not dry_run:
            self.emu.api_writes[(verb, f"{plural}/{sub}" if sub else plural, namespace)] += 1
        return resp

    async def _write(self, request: web.Request, rt: ResourceType, version: str, namespace: str, name: str,
                     sub: str | None, verb: str, q: Any, dry_run: bool) -> web.Response:
        if verb == "create":
            body = _DEC.decode(await request.read())
            if sub == "binding":
                return await self._bind(rt, namespace, name, body)
            if name:
                raise errors.method_not_allowed()
            obj = await self.store.create(rt, body, version=version, namespace=namespace, dry_run=dry_run)
            return _resp(_out(rt, version, obj), 201)
        if verb == "update":
            body = _DEC.decode(await request.read())
            obj = await self.store.update(rt, name, body, version=version, namespace=namespace, subresource=sub,
                                          dry_run=dry_run)
            return _resp(_out(rt, version, obj))
        if verb == "patch":
            return await self._patch(request, rt, version, namespace, name, sub, dry_run)
        if verb == "delete":
            raw = await request.read()
            options = _DEC.decode(raw) if raw else {}
            for key in ("propagationPolicy", "gracePeriodSeconds"):
                if key in q:
                    options.setdefault(key, q[key])
            obj, removed = await self.store.delete(rt, name, namespace=namespace, options=options, dry_run=dry_run)
            if removed and not rt.returns_deleted_object:
                return _resp({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                              "details": {"name": name, "group": rt.group, "kind": rt.plural,
                                          "uid": obj["metadata"]["uid"]}})
            return _resp(_out(rt, version, obj))
        raise errors.method_not_allowed()

    def _list(self, rt: ResourceType, version: str, namespace: str, q: Any, *,
              table_api: str | None = None) -> web.Response:
        label = parse_label_selector(q.get("labelSelector"))
        field = parse_field_selector(q.get("fieldSelector"), kind=rt.kind)
        _resource_version(q.get("resourceVersion") or "")  # (checked as a real server does; a list is always fresh)
        rv = str(self.store.rv)
        items = sorted(self.store.iter_objects(rt.key, namespace or None),
                       key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        if label or field:
            items = [o for o in items if (label is None or label(o)) and (field is None or field(o))]
        meta: dict[str, Any] = {"resourceVersion": rv}
        token = q.get("continue")
        if token:
            try:
                after = _DEC.decode(base64.urlsafe_b64decode(token.encode()))
                start = (after["ns"], after["name"])
            except Exception as e:
                raise errors.bad_request(f"continue key is not valid: {e}") from e
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
        limit = _limit(q.get("limit") or "")
        if limit > 0 and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = base64.urlsafe_b64encode(_ENC.encode(
                {"ns": last.get("namespace", ""), "name": last["name"], "rv": rv})).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if table_api is not None:  # kubectl get's server-side printing (tables.py; a row's object has its kind)
            return _resp(tables.table(rt, version, [_out(rt, version, o) for o in items], table_api=table_api,
                                      metadata=meta, include_object=q.get("includeObject", "")))
        if rt.builtin:
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        else:
            items = [_out(rt, version, o) for o in items]
        return _resp({"kind": rt.list_kind, "apiVersion": rt.api_version(version), "metadata": meta,
                      "items": items})

    async def _watch(self, request: web.Request, rt: ResourceType, version: str, namespace: str,
                     q: Any, *, table_api: str | None = None) -> web.StreamResponse:
        label = parse_label_selector(q.get("labelSelector"))
        field = parse_field_selector(q.get("fieldSelector"), kind=rt.kind)
        since = _resource_version(q.get("resourceVersion") or "") or None
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        resp = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
        resp.enable_chunked_encoding()
        api_version = rt.api_version(version)
        try:
            watcher = self.store.hub.subscribe(key=rt.key, namespace=namespace or None, label_match=label,
                                               field_match=field, since_rv=since, current_rv=self.store.rv)
        except ApiError as e:
            await resp.prepare(request)
            await resp.write(_ENC.encode({"type": "ERROR", "object": e.status()}) + b"\n")
            await resp.write_eof()
            return resp
        initial = []
        if since is None:
            initial = [o for o in self.store.iter_objects(rt.key, namespace or None)
                       if (label is None or label(o)) and (field is None or field(o))]
        headers_sent = False

        def as_table(etype: str, obj: dict[str, Any]) -> bytes:
            """An event of a watch read ``as=Table``: a one-row Table, the columns in the first only (tables.py)."""
            nonlocal headers_sent
            printed = tables.object_table(rt, version, _out(rt, version, obj), table_api=table_api or "v1",
                                          include_object=q.get("includeObject", ""))
            if headers_sent:
                printed["columnDefinitions"] = None
            headers_sent = True
            return _ENC.encode({"type": etype, "object": printed}) + b"\n"

        try:
            await resp.prepare(request)
            for o in initial:
                await resp.write(as_table("ADDED", o) if table_api else
                                 _ENC.encode({"type": "ADDED", "object": _out(rt, version, o)}) + b"\n")
            deadline = time.monotonic() + timeout if timeout else None
            interval = self.emu.bookmark_interval
            next_bookmark = time.monotonic() + interval
            while True:
                now = time.monotonic()
                wait_until = min(d for d in (deadline, next_bookmark if bookmarks else None, now + 3600) if d)
                try:
                    # a queued item first: wait_for(get(), 0) times out before get() runs, even with items queued,
                    # which spun this loop whenever a bookmark was due and events were waiting
                    item = watcher.queue.get_nowait() if not watcher.queue.empty() else await asyncio.wait_for(
                        watcher.queue.get(), max(0.0, wait_until - now))
                except TimeoutError:
                    now = time.monotonic()
                    if deadline is not None and now >= deadline:
                        break
                    if bookmarks and now >= next_bookmark and watcher.queue.empty():
                        bm = {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": api_version,
                                                             "metadata": {"resourceVersion": str(self.store.rv)}}}
                        await resp.write(_ENC.encode(bm) + b"\n")
                        next_bookmark = now + interval
                    continue
                if item is None:
                    break
                etype, obj, ev = item
                if table_api is not None:
                    line = as_table(etype, obj)
                elif ev is not None and etype == ev.type:
                    line = ev.encoded.get(api_version)
                    if line is None:
                        line = ev.encoded[api_version] = _ENC.encode(
                            {"type": etype, "object": _out(rt, version, obj)}) + b"\n"
                else:
                    line = _ENC.encode({"type": etype, "object": _out(rt, version, obj)}) + b"\n"
                await resp.write(line)
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            watcher.close()
        return resp

    async def _patch(self, request: web.Request, rt: ResourceType, version: str, namespace: str, name: str,
                     sub: str | None, dry_run: bool) -> web.Response:
        ctype = (request.content_type or "").lower()
        raw = await request.read()
        accepted = [patch.JSON_PATCH, patch.MERGE_PATCH, patch.APPLY_PATCH]
        if rt.builtin:
            accepted.insert(2, patch.STRATEGIC_PATCH)
        if ctype not in accepted:
            raise errors.unsupported_media_type(ctype, accepted)
        if ctype == patch.APPLY_PATCH:
            return await self._apply(request, rt, version, namespace, name, sub, raw, dry_run)
        body = _DEC.decode(raw)
        if ctype == patch.JSON_PATCH:
            if not isinstance(body, list):
                raise errors.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")

            def fn(old: dict[str, Any]) -> dict[str, Any]:
                return patch.json_patch(old, body)
        elif ctype == patch.MERGE_PATCH:
            def fn(old: dict[str, Any]) -> dict[str, Any]:
                return patch.merge_patch(old, body)
        else:
            def fn(old: dict[str, Any]) -> dict[str, Any]:
                return patch.strategic_merge_patch(old, body)
        obj = await self.store.patch(rt, name, fn, version=version, namespace=namespace, subresource=sub,
                                     dry_run=dry_run)
        return _resp(_out(rt, version, obj))

    async def _apply(self, request: web.Request, rt: ResourceType, version: str, namespace: str, name: str,
                     sub: str | None, raw: bytes, dry_run: bool) -> web.Response:
        """Server-side apply, approximated as create-or-merge (no managedFields, no field ownership)."""
        import yaml

        if not request.query.get("fieldManager"):
            raise ApiError(code=400, reason="BadRequest", message=(
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'))
        body = yaml.safe_load(raw)
        if self.store.get_obj(rt.key, namespace, name) is None and sub is None:
            body.setdefault("metadata", {})["name"] = name
            obj = await self.store.create(rt, body, version=version, namespace=namespace, dry_run=dry_run)
            return _resp(_out(rt, version, obj), 201)
        body.get("metadata", {}).pop("resourceVersion", None)
        obj = await self.store.patch(rt, name, lambda old: patch.strategic_merge_patch(old, body), version=version,
                                     namespace=namespace, subresource=sub, dry_run=dry_run)
        return _resp(_out(rt, version, obj))

    async def _bind(self, rt: ResourceType, namespace: str, name: str, body: dict[str, Any]) -> web.Response:
        target = (body.get("target") or {}).get("name")
        if not target:
            raise errors.invalid(kind="Binding", group="", name=name,
                                 causes=[("target.name", "FieldValueRequired", "Required value")])
        await self.emu.bind_pod(namespace=namespace, name=name, node=target)
        return _resp({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    async def admin_commit_times(self, request: web.Request) -> web.Response:
        """``{"times": {rv: monotonic seconds}}`` of the commits remembered (``commit_times``); 404 when off."""
        times = self.emu.commit_times
        if times is None:
            return _error(_not_found())
        since = int(request.query.get("since", "0") or 0)
        return _resp({"times": {str(rv): t for rv, t in times.items() if rv > since}})

    async def admin_writes(self, request: web.Request) -> web.Response:
        """``{"writes": [{verb, resource, namespace, count}], "commits": n|null, "committed_writes": n|null}``: the
        write requests served so far (answered without an error) and, with a write cost, the group commits."""
        gc_ = self.emu.group_commit
        rows = [{"verb": v, "resource": r, "namespace": ns, "count": n}
                for (v, r, ns), n in sorted(self.emu.api_writes.items())]
        return _resp({"writes": rows, "commits": gc_.commits if gc_ else None,
                      "committed_writes": gc_.writes if gc_ else None})

    async def admin_requests(self, request: web.Request) -> web.Response:
        """``{"requests": [{verb, resource, namespace, name, count}]}``: every request seen, per object (faulted or
        not; :attr:`.faults.Faults.requests`)."""
        rows = [{"verb": v, "resource": r, "namespace": ns, "name": n, "count": c}
                for (v, r, ns, n), c in sorted(self.emu.faults.requests.items())]
        return _resp({"requests": rows})

    async def admin_faults(self, request: web.Request) -> web.Response:
        body = await request.json()
        action = body.pop("action", "")
        faults = self.emu.faults
        if action == "fail":
            faults.fail(**body)
        elif action == "latency":
            faults.add_latency(body.pop("seconds"), **body)
        elif action == "drop_watches":
            return _resp({"dropped": faults.drop_watches(**body)})
        elif action == "expire_watches":
            return _resp({"dropped": faults.expire_watches()})
        elif action == "seed":
            faults.seed(body.get("seed"))
        elif action == "clear":
            faults.clear()
        else:
            return _error(errors.bad_request(f"unknown action {action!r}"))
        return _resp({"ok": True})
