"""Dynamic admission: MutatingWebhookConfiguration / ValidatingWebhookConfiguration honoured over HTTPS.

For each write the emulator looks up the webhook configurations stored in it (they are ordinary objects, so tests
register webhooks exactly as on a real cluster), picks the webhooks whose ``rules`` match (operation, apiGroups,
apiVersions, resources incl. ``pods/*`` and ``*/status`` forms, scope) and whose ``namespaceSelector`` /
``objectSelector`` match, and POSTs an ``admission.k8s.io/v1`` ``AdmissionReview``. Mutating webhooks run first,
in configuration-name order, each seeing the previous one's patch (``patchType: JSONPatch``, base64); the object
is then validated by the kind's schema and only then are validating webhooks called — the real server's order.

Transport: ``clientConfig.url`` as given, or ``clientConfig.service`` mapped through ``webhook_services`` to a
local ``host:port`` (no cluster DNS here) while still verifying the certificate for ``<name>.<namespace>.svc`` like
the real server. The CA is the webhook's ``caBundle``. ``timeoutSeconds`` (default 10) and ``failurePolicy``
(default ``Fail``) apply; a denial becomes ``admission webhook "<name>" denied the request: <message>`` with the
webhook's code (at least 400). Webhook configurations themselves are never sent to webhooks (as upstream).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
import uuid
from typing import TYPE_CHECKING, Any

import aiohttp

from . import errors, patch
from .selectors import match_label_selector_object

if TYPE_CHECKING:
    from .resources import ResourceType
    from .store import Store

MUTATING = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")
VALIDATING = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")


def _rule_matches(rule: dict[str, Any], *, op: str, rt: ResourceType, version: str, sub: str | None) -> bool:
    ops = rule.get("operations") or []
    if "*" not in ops and op not in ops:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and rt.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    if "*" not in versions and version not in versions:
        return False
    scope = rule.get("scope") or "*"
    if (scope == "Namespaced" and not rt.namespaced) or (scope == "Cluster" and rt.namespaced):
        return False
    want = f"{rt.plural}/{sub}" if sub else rt.plural
    for r in rule.get("resources") or []:
        if r in ("*/*", want):
            return True
        if r == "*" and not sub:
            return True
        base, _, rsub = r.partition("/")
        if rsub and sub and (base in ("*", rt.plural)) and rsub in ("*", sub):
            return True
    return False


class WebhookAdmission:
    def __init__(self, *, services: dict[str, str], extra_ca: str | bytes | None = None) -> None:
        self.services = services
        self.extra_ca = extra_ca.decode() if isinstance(extra_ca, bytes) else extra_ca
        self._session: aiohttp.ClientSession | None = None
        self._ssl: dict[str, ssl.SSLContext] = {}
        self.calls = 0

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _context(self, ca_bundle: str | None) -> ssl.SSLContext:
        key = ca_bundle or ""
        ctx = self._ssl.get(key)
        if ctx is None:
            ctx = ssl.create_default_context()
            if ca_bundle:
                ctx.load_verify_locations(cadata=base64.b64decode(ca_bundle).decode())
            if self.extra_ca:
                ctx.load_verify_locations(cadata=self.extra_ca)
            self._ssl[key] = ctx
        return ctx

    async def admit(
        self, *, store: Store, rt: ResourceType, version: str, operation: str, subresource: str | None,
        obj: dict[str, Any] | None, old: dict[str, Any] | None, namespace: str, name: str, dry_run: bool,
        mutating: bool,
    ) -> dict[str, Any] | None:
        if rt.key in (MUTATING, VALIDATING):
            return obj
        configs = list(store.iter_objects(MUTATING if mutating else VALIDATING))
        if not configs:
            return obj
        configs.sort(key=lambda c: c["metadata"]["name"])
        for cfg in configs:
            for hook in cfg.get("webhooks") or []:
                if not any(_rule_matches(r, op=operation, rt=rt, version=version, sub=subresource)
                           for r in hook.get("rules") or []):
                    continue
                if not self._selectors_match(store, hook, rt, namespace, obj, old):
                    continue
                obj = await self._call(hook, rt=rt, version=version, operation=operation, sub=subresource,
                                       obj=obj, old=old, namespace=namespace, name=name, dry_run=dry_run,
                                       mutating=mutating)
        return obj

    def _selectors_match(self, store: Store, hook: dict[str, Any], rt: ResourceType, namespace: str,
                         obj: dict[str, Any] | None, old: dict[str, Any] | None) -> bool:
        ns_sel = hook.get("namespaceSelector")
        if ns_sel and (ns_sel.get("matchLabels") or ns_sel.get("matchExpressions")):
            if rt.namespaced:
                ns = store.get_obj(("", "namespaces"), "", namespace)
                labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
                if not match_label_selector_object(ns_sel, labels):
                    return False
            elif rt.key == ("", "namespaces"):
                labels = ((obj or old or {}).get("metadata") or {}).get("labels") or {}
                if not match_label_selector_object(ns_sel, labels):
                    return False
        obj_sel = hook.get("objectSelector")
        if obj_sel and (obj_sel.get("matchLabels") or obj_sel.get("matchExpressions")):
            candidates = [o for o in (obj, old) if o is not None]
            if not any(match_label_selector_object(obj_sel, (o.get("metadata") or {}).get("labels") or {})
                       for o in candidates):
                return False
        return True

    async def _call(
        self, hook: dict[str, Any], *, rt: ResourceType, version: str, operation: str, sub: str | None,
        obj: dict[str, Any] | None, old: dict[str, Any] | None, namespace: str, name: str, dry_run: bool,
        mutating: bool,
    ) -> dict[str, Any] | None:
        hook_name = hook.get("name", "")
        uid = str(uuid.uuid4())
        gvk = {"group": rt.group, "version": version, "kind": rt.kind}
        gvr = {"group": rt.group, "version": version, "resource": rt.plural}
        review = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
                "name": name, "namespace": namespace or None, "operation": operation,
                "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
                "object": obj, "oldObject": old, "dryRun": dry_run,
                "options": {"kind": f"{operation.capitalize()}Options", "apiVersion": "meta.k8s.io/v1"},
            },
        }
        if sub:
            review["request"]["subResource"] = sub
            review["request"]["requestSubResource"] = sub
        cc = hook.get("clientConfig") or {}
        server_hostname = None
        if cc.get("url"):
            url = cc["url"]
        else:
            svc = cc.get("service") or {}
            port = svc.get("port", 443)
            target = (self.services.get(f"{svc.get('namespace')}/{svc.get('name')}:{port}")
                      or self.services.get(f"{svc.get('namespace')}/{svc.get('name')}"))
            if target is None:
                target = f"{svc.get('name')}.{svc.get('namespace')}.svc:{port}"
            url = f"https://{target}{svc.get('path') or '/'}"
            server_hostname = f"{svc.get('name')}.{svc.get('namespace')}.svc"
        timeout = float(hook.get("timeoutSeconds") or 10)
        try:
            if self._session is None:
                self._session = aiohttp.ClientSession()
            self.calls += 1
            kwargs: dict[str, Any] = {"json": review, "timeout": aiohttp.ClientTimeout(total=timeout)}
            if url.startswith("https://"):
                kwargs["ssl"] = self._context(cc.get("caBundle"))
                if server_hostname:
                    kwargs["server_hostname"] = server_hostname
            async with self._session.post(url, **kwargs) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"received invalid webhook response: HTTP {resp.status}")
                answer = await resp.json(content_type=None)
            response = (answer or {}).get("response") or {}
            if response.get("uid") != uid:
                raise RuntimeError(f"expected response.uid={uid!r}, got {response.get('uid')!r}")
        except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError, ssl.SSLError) as e:
            if (hook.get("failurePolicy") or "Fail") == "Ignore":
                return obj
            why = "context deadline exceeded" if isinstance(e, TimeoutError | asyncio.TimeoutError) else str(e)
            raise errors.internal(f'failed calling webhook "{hook_name}": failed to call webhook: '
                                  f'Post "{url}": {why}') from e
        if not response.get("allowed"):
            result = copy.deepcopy(response.get("status") or {})
            code = max(int(result.get("code") or 0), 400)
            denied = f'admission webhook "{hook_name}" denied the request'
            if result.get("message"):
                msg = f"{denied}: {result['message']}"
            elif result.get("reason"):
                msg = f"{denied}: {result['reason']}"
            else:
                msg = f"{denied} without explanation"
            raise errors.ApiError(code=code, reason=result.get("reason") or "", message=msg,
                                  details=result.get("details"))
        if mutating and response.get("patch") and obj is not None:
            if response.get("patchType", "JSONPatch") != "JSONPatch":
                raise errors.internal(f'failed calling webhook "{hook_name}": unsupported patch type')
            ops = json.loads(base64.b64decode(response["patch"]))
            obj = patch.json_patch(obj, ops)
        return obj
