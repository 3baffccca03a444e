"""ops/: the manifests parse, the CRDs are structural, and RBAC is exactly what the code uses.

The RBAC check is two tables kept next to each other on purpose:

* :data:`CALL_SITES` — every Kubernetes API call tether's daemon makes, found by reading the code (an AST scan of
  ``adapters/kubernetes/*.py`` and the watch sources in ``adapters/daemon/daemon.py``), with the (resource, verb) pairs
  each one needs. A new call site that is not in the table fails :func:`test_call_sites_table_matches_the_code`:
  whoever adds a call decides its permission here.
* the ClusterRole/Roles the Helm chart (``ops/chart``, rendered with every feature on) puts on Karmada's API server
  must grant exactly the union of those, nothing more (no ``*``, no ``update`` on claims, …) and nothing less; the
  Role it makes in the host cluster exactly what :data:`HOST_CALL_SITES` needs; ``ops/members/rbac.yaml`` exactly
  what :data:`MEMBER_CALL_SITES` needs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLAIMS, KubeClient
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv

from .test_chart import EVERYTHING, chart, host_objects

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
CRDS = OPS / "crds"
TETHER_CRDS = sorted(CRDS.glob("datadependency.volcano.sh_*.yaml"))
ALL_CRDS = sorted(p for p in CRDS.rglob("*.yaml") if p.name != "kustomization.yaml")


def docs(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def karmada_objects() -> list[dict[str, Any]]:
    """What the chart puts on Karmada's API server with every feature on."""
    return chart.karmada_objects(EVERYTHING)


# --------------------------------------------------------------------------------------------- parsing, kustomize


#: Not Kubernetes objects: the chart's templates (tests/ops/test_chart.py), the alert rules (test_monitoring.py).
_NOT_OBJECTS = ("chart", "monitoring")


@pytest.mark.parametrize("path", sorted(p for p in OPS.rglob("*.yaml")
                                        if p.relative_to(OPS).parts[0] not in _NOT_OBJECTS),
                         ids=lambda p: str(p.relative_to(OPS)))
def test_every_yaml_file_parses(path: Path) -> None:
    for d in docs(path):
        assert isinstance(d, dict) and d.get("kind"), f"{path}: a document without kind"


def test_the_crd_kustomization_lists_tethers_crds() -> None:
    crds = docs(CRDS / "kustomization.yaml")[0]
    assert sorted(crds["resources"]) == [p.name for p in TETHER_CRDS]


# ---------------------------------------------------------------------------------------- structural schemas

_TYPES = {"array", "boolean", "integer", "number", "object", "string"}
_JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
_FORBIDDEN = {"$ref": "$ref", "id": "id", "definitions": "definitions", "dependencies": "dependencies",
              "patternProperties": "patternProperties", "additionalItems": "additionalItems"}
_NOT_IN_JUNCTORS = ("description", "type", "default", "additionalProperties", "nullable")
_METADATA_ALLOWED = {"type", "properties", "description"}


def structural_errors(schema: dict[str, Any]) -> list[str]:
    """Why the apiserver would reject ``schema`` as a CRD's ``openAPIV3Schema`` (empty: it would not).

    The rules of "Specifying a structural schema" (k8s.io docs, CustomResourceDefinitions) and of
    apiextensions' ``validateCustomResourceDefinitionOpenAPISchema``:

    1. a non-empty ``type`` at the root, on every property, additionalProperties and items schema — except where
       ``x-kubernetes-int-or-string: true`` or ``x-kubernetes-preserve-unknown-fields: true``;
    2. a field or item used inside ``allOf``/``anyOf``/``oneOf``/``not`` is also specified outside;
    3. no ``description``, ``type``, ``default``, ``additionalProperties``, ``nullable`` inside those junctors
       (except the two int-or-string patterns);
    4. ``metadata`` at the root may only restrict ``name`` and ``generateName``;
    plus: ``properties`` and ``additionalProperties`` are mutually exclusive (unless additionalProperties is
    ``true``); no ``uniqueItems: true``, ``$ref``, ``id``, ``definitions``, ``dependencies``,
    ``patternProperties``, ``additionalItems``, ``type: null``, tuple ``items``;
    ``x-kubernetes-preserve-unknown-fields`` only ``true``; int-or-string without a type; list-type map with
    scalar map keys that are item properties; map-type only on objects; list-type only on arrays; arrays have
    ``items``; the root is an object.
    """
    errors: list[str] = []

    def err(path: str, msg: str) -> None:
        errors.append(f"{path or '<root>'}: {msg}")

    def fields_used_in(node: dict[str, Any]) -> Iterator[tuple[str, str]]:
        for j in _JUNCTORS:
            subs = node.get(j)
            for sub in ([subs] if isinstance(subs, dict) else subs or []):
                for name in (sub.get("properties") or {}):
                    yield j, name
                if "items" in sub:
                    yield j, "[items]"
                yield from fields_used_in(sub)

    def check_junctor(node: dict[str, Any], path: str) -> None:
        """Value validations only; the int-or-string patterns may use type (anyOf: [{type: integer}, ...])."""
        for key in _NOT_IN_JUNCTORS:
            if key in node and not (key == "type" and node[key] in ("integer", "string")):
                err(path, f"{key} is not allowed inside allOf/anyOf/oneOf/not")
        for name, sub in (node.get("properties") or {}).items():
            check_junctor(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            check_junctor(node["items"], f"{path}[]")
        for j in _JUNCTORS:
            subs = node.get(j)
            for i, sub in enumerate([subs] if isinstance(subs, dict) else subs or []):
                check_junctor(sub, f"{path}.{j}[{i}]")

    def walk(node: Any, path: str, *, needs_type: bool, root: bool = False) -> None:
        if not isinstance(node, dict):
            err(path, f"a schema must be an object, got {type(node).__name__}")
            return
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        preserve = node.get("x-kubernetes-preserve-unknown-fields")
        if preserve is not None and preserve is not True:
            err(path, "x-kubernetes-preserve-unknown-fields must be true or undefined")
        typ = node.get("type")
        if typ is not None and typ not in _TYPES:
            err(path, f"type {typ!r} is not one of {sorted(_TYPES)}")
        if needs_type and not typ and not int_or_string and preserve is not True:
            err(path, "type must not be empty (structural schema rule 1)")
        if int_or_string and typ:
            err(path, "x-kubernetes-int-or-string: true must not set a type")
        for key, label in _FORBIDDEN.items():
            if key in node:
                err(path, f"{label} is not supported in CRD schemas")
        if typ == "null":
            err(path, "type null is not supported")
        if node.get("uniqueItems") is True:
            err(path, "uniqueItems cannot be true")
        props = node.get("properties")
        addl = node.get("additionalProperties")
        if props and addl is not None and addl is not True:
            err(path, "additionalProperties and properties are mutually exclusive")
        if (props or isinstance(addl, dict)) and typ not in (None, "object"):
            err(path, f"properties on a node of type {typ!r}")
        if "items" in node:
            if isinstance(node["items"], list):
                err(path, "items must be a schema object, not an array")
            elif typ not in (None, "array"):
                err(path, f"items on a node of type {typ!r}")
        if typ == "array" and "items" not in node:
            err(path, "an array must specify items")
        if "x-kubernetes-map-type" in node:
            if typ != "object":
                err(path, "x-kubernetes-map-type needs type object")
            if node["x-kubernetes-map-type"] not in ("atomic", "granular"):
                err(path, "x-kubernetes-map-type must be atomic or granular")
        list_type = node.get("x-kubernetes-list-type")
        if list_type is not None:
            if typ != "array":
                err(path, "x-kubernetes-list-type needs type array")
            if list_type not in ("atomic", "set", "map"):
                err(path, f"x-kubernetes-list-type {list_type!r}")
        keys = node.get("x-kubernetes-list-map-keys") or []
        if keys and list_type != "map":
            err(path, "x-kubernetes-list-map-keys needs x-kubernetes-list-type: map")
        if list_type == "map":
            item = node.get("items") if isinstance(node.get("items"), dict) else {}
            if not keys:
                err(path, "x-kubernetes-list-type: map needs x-kubernetes-list-map-keys")
            if item.get("type") != "object":
                err(path, "x-kubernetes-list-type: map needs object items")
            for k in keys:
                key_schema = (item.get("properties") or {}).get(k)
                if key_schema is None:
                    err(path, f"list map key {k!r} is not an item property")
                elif key_schema.get("type") in ("array", "object"):
                    err(path, f"list map key {k!r} must be a scalar")
        if node.get("x-kubernetes-embedded-resource") is True and typ != "object":
            err(path, "x-kubernetes-embedded-resource needs type object")
        # junctors: value validations only, and every field they use is specified outside too
        for j in _JUNCTORS:
            subs = node.get(j)
            for i, sub in enumerate([subs] if isinstance(subs, dict) else subs or []):
                if isinstance(sub, dict):
                    check_junctor(sub, f"{path}.{j}[{i}]")
        for j, name in fields_used_in(node):
            if name == "[items]":
                if "items" not in node:
                    err(path, f"items used in {j} but not specified outside it")
            elif name not in (props or {}):
                err(path, f"field {name!r} used in {j} but not specified outside it")
        if root:
            if typ != "object":
                err(path, "the root must be of type object")
            meta = (props or {}).get("metadata")
            if meta is not None:
                extra = set(meta) - _METADATA_ALLOWED
                if extra:
                    err("metadata", f"only name and generateName may be restricted, found {sorted(extra)}")
                if meta.get("type") not in (None, "object"):
                    err("metadata", "must be of type object")
                for name, sub in (meta.get("properties") or {}).items():
                    if name not in ("name", "generateName"):
                        err(f"metadata.{name}", "only name and generateName may be restricted")
                    elif sub.get("type") not in (None, "string") or "default" in sub:
                        err(f"metadata.{name}", "must be a string without a default")
            for name in ("apiVersion", "kind"):
                sub = (props or {}).get(name)
                if sub is not None and sub.get("type") != "string":
                    err(name, "must be of type string")
        for name, sub in (props or {}).items():
            walk(sub, f"{path}.{name}" if path else name, needs_type=True)
        if isinstance(addl, dict):
            walk(addl, f"{path}[*]", needs_type=True)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]", needs_type=True)

    walk(schema, "", needs_type=True, root=True)
    return errors


def test_the_checker_catches_what_the_apiserver_rejects() -> None:
    ok = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"],
                                "properties": {"name": {"type": "string"}}}},
            "a": {"type": "string"}, "b": {"type": "string"},
        }, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}},
    }}
    assert structural_errors(ok) == []
    bad = [
        ({"type": "object", "properties": {"spec": {"properties": {}}}}, "type must not be empty"),
        ({"type": "object", "properties": {"s": {"type": "object", "properties": {"a": {"type": "string"}},
                                                 "additionalProperties": False}}}, "mutually exclusive"),
        ({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "labels": {"type": "object"}}}}}, "only name and generateName"),
        ({"type": "object", "properties": {"s": {"type": "object", "anyOf": [
            {"properties": {"x": {"type": "string"}}}]}}}, "not specified outside"),
        ({"type": "object", "properties": {"s": {"type": "string", "anyOf": [{"description": "d"}]}}},
         "description is not allowed"),
        ({"type": "object", "properties": {"s": {"type": "array", "items": {"type": "string"},
                                                 "uniqueItems": True}}}, "uniqueItems"),
        ({"type": "object", "properties": {"s": {"$ref": "#/definitions/x"}}}, "$ref"),
        ({"type": "object", "properties": {"s": {"type": "array"}}}, "must specify items"),
        ({"type": "object", "properties": {"s": {"type": "object",
                                                 "x-kubernetes-preserve-unknown-fields": False}}}, "must be true"),
    ]
    for schema, message in bad:
        assert any(message in e for e in structural_errors(schema)), (schema, structural_errors(schema))


def crd_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in docs(path) if d.get("kind") == "CustomResourceDefinition"]


@pytest.mark.parametrize("path", ALL_CRDS, ids=lambda p: str(p.relative_to(CRDS)))
def test_crds_are_structural(path: Path) -> None:
    crds = crd_documents(path)
    assert crds, f"{path}: no CustomResourceDefinition"
    for crd in crds:
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        spec = crd["spec"]
        assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
        assert sum(v.get("storage", False) for v in spec["versions"]) == 1, "exactly one storage version"
        for version in spec["versions"]:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            assert schema, f"{crd['metadata']['name']} {version['name']}: v1 CRDs need openAPIV3Schema"
            errors = structural_errors(schema)
            assert not errors, f"{crd['metadata']['name']} {version['name']}:\n" + "\n".join(errors)


async def test_tether_crds_register_and_serve_on_the_emulator(kube: KubeEnv) -> None:
    names = await kube.register_crds(*TETHER_CRDS)
    assert sorted(names) == ["datasourceclaims.datadependency.volcano.sh", "datasources.datadependency.volcano.sh"]
    client = KubeClient(kube.api_client)
    created = await client.create(CLAIMS, manifests.claim("c", namespace=kube.namespace, table="prod.sales.orders"),
                                  namespace=kube.namespace)
    assert created["spec"]["dataSourceName"] == "prod.sales.orders"


# ----------------------------------------------------------------------------------------------------------- RBAC

#: Every API call of the daemon: (file, client method, first argument as written[, subresource]) →
#: the (apiGroup, resource, verb) it needs. ``res`` in executor.py is ``BY_KIND[ref.kind]`` for the command's
#: target: claims and DataSources (finalizers, status), ResourceBindings (placement).
CALL_SITES: dict[tuple[str, ...], set[tuple[str, str, str]]] = {
    ("executor.py", "get", "res"): {("datadependency.volcano.sh", "datasourceclaims", "get"),
                                    ("datadependency.volcano.sh", "datasources", "get"),
                                    ("work.karmada.io", "resourcebindings", "get")},
    ("executor.py", "patch", "res"): {("datadependency.volcano.sh", "datasourceclaims", "patch"),
                                      ("datadependency.volcano.sh", "datasources", "patch"),
                                      ("work.karmada.io", "resourcebindings", "patch")},
    ("executor.py", "patch", "res", "status"): {("datadependency.volcano.sh", "datasourceclaims/status", "patch"),
                                                ("datadependency.volcano.sh", "datasources/status", "patch")},
    ("executor.py", "get", "DATASOURCES"): {("datadependency.volcano.sh", "datasources", "get")},
    ("executor.py", "create", "DATASOURCES"): {("datadependency.volcano.sh", "datasources", "create")},
    ("executor.py", "patch", "DATASOURCES"): {("datadependency.volcano.sh", "datasources", "patch")},
    ("executor.py", "delete", "DATASOURCES"): {("datadependency.volcano.sh", "datasources", "delete")},
    ("events.py", "create", "EVENTS"): {("", "events", "create")},
    ("events.py", "get", "EVENTS"): {("", "events", "get")},  # a repeated Event: counted on the one on record
    ("events.py", "patch", "EVENTS"): {("", "events", "patch")},
    # queue admission (admission_executor.py): resume/hold annotations go through res (resourcebindings, above)
    ("admission_executor.py", "patch", "res"): {("work.karmada.io", "resourcebindings", "patch")},
    ("admission_executor.py", "get", "QUEUES"): {("scheduling.volcano.sh", "queues", "get")},
    ("admission_executor.py", "patch", "QUEUES", "status"): {("scheduling.volcano.sh", "queues/status", "patch")},
    ("admission_executor.py", "create", "QUEUES"): {("scheduling.volcano.sh", "queues", "create")},
    # the caBundle of tether's MutatingWebhookConfiguration (--webhook-self-signed)
    ("webhook_certs.py", "get", "MUTATING_WEBHOOKS"): {
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get")},
    ("webhook_certs.py", "patch", "MUTATING_WEBHOOKS"): {
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch")},
    ("leader.py", "get", "LEASES"): {("coordination.k8s.io", "leases", "get")},
    ("leader.py", "create", "LEASES"): {("coordination.k8s.io", "leases", "create")},
    ("leader.py", "replace", "LEASES"): {("coordination.k8s.io", "leases", "update")},
    # the Lease namespace when it is missing: ops/deploy creates it, so the deployed tether never needs the right
    ("leader.py", "create", "NAMESPACES"): set(),
    # --members-from-karmada: a Karmada Cluster's secretRef, read on the control plane (self.karmada)
    ("members.py", "get", "SECRETS"): {("", "secrets", "get")},
    # watch.py lists and watches self.resource: one per WatchSource in daemon.py
    ("watch.py", "list", "self.resource"): set(),
    ("watch.py", "watch", "self.resource"): set(),
}
WATCHED = {
    "CONFIGMAPS": ("", "configmaps"), "CLUSTERS": ("cluster.karmada.io", "clusters"),
    "DATASOURCES": ("datadependency.volcano.sh", "datasources"),
    "CLAIMS": ("datadependency.volcano.sh", "datasourceclaims"), "BINDINGS": ("work.karmada.io", "resourcebindings"),
    # --admission: queues, priorities and the workloads' queue names (read only)
    "QUEUES": ("scheduling.volcano.sh", "queues"), "PRIORITY_CLASSES": ("scheduling.k8s.io", "priorityclasses"),
    "DEPLOYMENTS": ("apps", "deployments"), "VOLCANO_JOBS": ("batch.volcano.sh", "jobs"),
}
#: Where each permission is granted: cluster-wide, or a Role in a namespace (optionally by resourceNames).
NAMESPACED_GRANTS = {
    # the plugin ConfigMap (volcano-global) and the admission ConfigMap (tether-system), each by name: see granted()
    ("", "configmaps"): ("volcano-global|tether-system", None),
    ("", "secrets"): ("karmada-cluster", None),  # Karmada's cluster-secret namespace (Cluster spec.secretRef)
    ("coordination.k8s.io", "leases"): ("tether-system", None),
}
#: Cluster-wide grants limited to objects by name: tether's own webhook configuration (its caBundle).
NAMED_GRANTS = {("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): ["tether-resourcebindings"]}
_METHODS = {"get", "list", "watch", "create", "patch", "replace", "delete", "delete_collection"}

#: Member clusters (ops/members/rbac.yaml): the calls members.py makes with a member's client (``self.kube`` of
#: ``_MemberKube``), on the member's API server — not Karmada's.
MEMBER_FILES = {"members.py"}
_FLUID = ("dataloads", "datamigrates", "dataprocesses", "databackups")
MEMBER_CALL_SITES: dict[tuple[str, ...], set[tuple[str, str, str]]] = {
    ("members.py", "get", "PODS"): {("", "pods", "get")},  # ReleasePod reads the pod as it is
    ("members.py", "patch", "PODS"): {("", "pods", "patch")},  # … and tightens + ungates it in one JSON patch
    # SetMemberCondition: res = _BY_KIND[kind] of a Fluid operation (tether's condition only)
    ("members.py", "get", "res"): {("data.fluid.io", r, "get") for r in _FLUID},
    ("members.py", "patch", "res", "status"): {("data.fluid.io", f"{r}/status", "patch") for r in _FLUID},
}
#: What _MemberKube inherits from KubeExecutor and calls in members: EmitMemberEvent → apply_emit_kubernetes_event
#: (executor.py's create, get and patch of Events), checked below to be still what it calls.
MEMBER_INHERITED = {"apply_emit_kubernetes_event": {("", "events", "create"), ("", "events", "get"),
                                                    ("", "events", "patch")}}


#: The cluster tether runs in (the host cluster, the pod's service account): the leader's EndpointSlices
#: (``--leader-service``), granted by the chart's Role ``tether-leader-endpoints`` in the release namespace.
HOST_FILES = {"leader_endpoints.py"}
HOST_CALL_SITES: dict[tuple[str, ...], set[tuple[str, str, str]]] = {
    ("leader_endpoints.py", "get", "ENDPOINT_SLICES"): {("discovery.k8s.io", "endpointslices", "get")},
    ("leader_endpoints.py", "create", "ENDPOINT_SLICES"): {("discovery.k8s.io", "endpointslices", "create")},
    ("leader_endpoints.py", "replace", "ENDPOINT_SLICES"): {("discovery.k8s.io", "endpointslices", "update")},
}


def code_call_sites(*, plane: str = "control") -> set[tuple[str, ...]]:
    """The API calls in adapters/kubernetes/*.py, of the control plane (Karmada's API server), of the members, or
    of the host cluster."""
    found: set[tuple[str, ...]] = set()
    for path in sorted((ROOT / "adapters" / "kubernetes").glob("*.py")):
        if path.name == "client.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _METHODS
                    and ast.unparse(node.func.value).endswith(("kube", "karmada")) and node.args):
                continue
            receiver = ast.unparse(node.func.value)
            member = path.name in MEMBER_FILES and not receiver.endswith("karmada")
            where = "member" if member else "host" if path.name in HOST_FILES else "control"
            if where != plane:
                continue
            key: tuple[str, ...] = (path.name, node.func.attr, ast.unparse(node.args[0]))
            sub = next((kw for kw in node.keywords if kw.arg == "subresource"), None)
            if sub is not None:
                key += (ast.literal_eval(sub.value),)
            found.add(key)
    return found


def watched_resources() -> set[str]:
    tree = ast.parse((ROOT / "adapters" / "daemon" / "daemon.py").read_text())
    return {ast.unparse(n.args[2]) for n in ast.walk(tree)
            if isinstance(n, ast.Call) and ast.unparse(n.func) == "WatchSource"}


def required_permissions() -> set[tuple[str, str, str]]:
    needed = set().union(*CALL_SITES.values())
    for name in watched_resources():
        group, resource = WATCHED[name]
        needed |= {(group, resource, "list"), (group, resource, "watch")}
    return needed


def test_call_sites_table_matches_the_code() -> None:
    found = code_call_sites()
    assert found == set(CALL_SITES), (
        f"new API calls (add them to CALL_SITES and to ops/chart/templates/karmada/_objects.tpl): "
        f"{sorted(found - set(CALL_SITES))}; "
        f"calls gone from the code: {sorted(set(CALL_SITES) - found)}")
    assert watched_resources() == set(WATCHED)
    members = code_call_sites(plane="member")
    assert members == set(MEMBER_CALL_SITES), (
        f"new member API calls (add them to MEMBER_CALL_SITES and to ops/members/rbac.yaml): "
        f"{sorted(members - set(MEMBER_CALL_SITES))}; calls gone from the code: "
        f"{sorted(set(MEMBER_CALL_SITES) - members)}")
    host = code_call_sites(plane="host")
    assert host == set(HOST_CALL_SITES), f"host-cluster API calls changed: {sorted(host ^ set(HOST_CALL_SITES))}"
    source = (ROOT / "adapters" / "kubernetes" / "members.py").read_text()
    executor = (ROOT / "adapters" / "kubernetes" / "executor.py").read_text()
    for method in MEMBER_INHERITED:
        assert f"self.{method}(" in source, f"members.py no longer calls {method}: update MEMBER_INHERITED"
    # the Events a member executor inherits are the recorder's (events.py): create, a repeat's patch, get on 409
    assert {k for k in CALL_SITES if k[0] == "events.py" and k[2] == "EVENTS"} == {
        ("events.py", verb, "EVENTS") for verb in ("create", "get", "patch")} and "self.events.record(" in executor


PRODUCT_ROOMS = ("kubernetes", "daemon", "cli", "catalog", "log")


def resource_constants() -> set[str]:
    """The names bound to a ``Resource(...)`` anywhere in the product (``CLAIMS``, ``PODS``, ``SECRETS`` …)."""
    names: set[str] = set()
    for room in PRODUCT_ROOMS:
        for path in sorted((ROOT / "adapters" / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                        and ast.unparse(node.value.func) == "Resource":
                    names |= {ast.unparse(target) for target in node.targets}
    return names


def test_no_api_call_escapes_the_scan() -> None:
    """:func:`code_call_sites` reads calls on receivers named ``*kube``/``*karmada`` in adapters/kubernetes/: here
    every call of a client verb on a Resource, by any receiver, anywhere in the product, must be one it read — so
    a call through another name or from another folder cannot be granted by nobody or slip past the spot checks."""
    constants = resource_constants() | {"res", "self.resource"}
    assert {"CLAIMS", "PODS", "SECRETS", "LEASES", "MUTATING_WEBHOOKS"} <= constants
    scanned = code_call_sites() | code_call_sites(plane="member") | code_call_sites(plane="host")
    calls: set[tuple[str, ...]] = set()
    for room in PRODUCT_ROOMS:
        for path in sorted((ROOT / "adapters" / room).rglob("*.py")):
            if path.name == "client.py" and room == "kubernetes":
                continue  # the client itself: the verbs are defined there
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in _METHODS and node.args and ast.unparse(node.args[0]) in constants):
                    key: tuple[str, ...] = (path.name, node.func.attr, ast.unparse(node.args[0]))
                    sub = next((kw for kw in node.keywords if kw.arg == "subresource"), None)
                    calls.add(key + ((ast.literal_eval(sub.value),) if sub is not None else ()))
    assert calls == scanned, f"calls the RBAC scan does not see: {sorted(calls - scanned)}"


def test_member_watch_sources_are_the_member_resources() -> None:
    """member_required_permissions() grants list/watch on MEMBER_RESOURCES: members.py must watch exactly those."""
    tree = ast.parse((ROOT / "adapters" / "kubernetes" / "members.py").read_text())
    comprehensions = [n for n in ast.walk(tree) if isinstance(n, ast.ListComp)
                      and isinstance(n.elt, ast.Call) and ast.unparse(n.elt.func) == "WatchSource"]
    assert [(ast.unparse(c.elt.args[2]), ast.unparse(c.generators[0].iter)) for c in comprehensions] == [
        ("res", "MEMBER_RESOURCES")]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "WatchSource"]
    assert len(calls) == 1


def member_required_permissions() -> set[tuple[str, str, str]]:
    from tether.adapters.kubernetes.members import MEMBER_RESOURCES

    needed = set().union(*MEMBER_CALL_SITES.values(), *MEMBER_INHERITED.values())
    for res in MEMBER_RESOURCES:  # each member's watch sources (members.py: one WatchSource per resource)
        needed |= {(res.group, res.plural, "list"), (res.group, res.plural, "watch")}
    return needed


def member_granted() -> tuple[set[tuple[str, str, str]], list[str]]:
    """(group, resource, verb) granted to tether's ServiceAccount in a member cluster, and problems."""
    objects = [d for p in sorted((OPS / "members").glob("*.yaml")) if p.name != "kustomization.yaml" for d in docs(p)]
    roles = {d["metadata"]["name"]: d for d in objects if d["kind"] == "ClusterRole"}
    out: set[tuple[str, str, str]] = set()
    problems = [f"{d['kind']}/{d['metadata']['name']}: member grants are cluster-wide ClusterRoles"
                for d in objects if d["kind"] in ("Role", "RoleBinding")]
    for binding in (d for d in objects if d["kind"] == "ClusterRoleBinding"):
        if {"kind": "ServiceAccount", "name": "tether", "namespace": "tether-system"} not in binding["subjects"]:
            continue
        role = roles.get(binding["roleRef"]["name"])
        if role is None:
            problems.append(f"ClusterRoleBinding/{binding['metadata']['name']} refers to a missing ClusterRole")
            continue
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                if "*" in rule[field]:
                    problems.append(f"ClusterRole/{role['metadata']['name']}: '*' in {field}")
            out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out, problems


def test_member_rbac_grants_exactly_what_the_code_uses() -> None:
    have, problems = member_granted()
    assert not problems, "\n".join(problems)
    need = member_required_permissions()
    assert not need - have, f"missing permissions in ops/members/rbac.yaml: {sorted(need - have)}"
    assert not have - need, f"permissions tether never uses in a member: {sorted(have - need)}"


def test_member_rbac_spot_checks() -> None:
    have, _ = member_granted()
    assert {v for g, r, v in have if r == "pods"} == {"get", "list", "watch", "patch"}  # never create or delete
    assert not any(r in ("secrets", "pods/status", "pods/binding") for _, r, _ in have)
    assert {(r, v) for g, r, v in have if g == "data.fluid.io" and not r.endswith("/status")} == {
        (r, v) for r in _FLUID for v in ("get", "list", "watch")}  # an operation's spec is never written
    assert {v for g, r, v in have if r in ("jobs", "podgroups", "nodes")} == {"list", "watch"}


def test_member_webhook_configuration_is_narrow() -> None:
    [config] = [d for d in docs(OPS / "members" / "mutatingwebhookconfiguration.yaml")]
    [hook] = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "NoneOnDryRun"
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["namespaceSelector"] == {"matchLabels": {"tether.dev/pod-placement": "enabled"}}
    assert hook["clientConfig"]["url"].endswith("/mutate/pods/MEMBER_NAME")


def granted() -> tuple[set[tuple[str, str, str]], list[str]]:
    """(group, resource, verb) granted to tether's ServiceAccount, and problems with where/how it is granted."""
    objects = karmada_objects()
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in objects
             if d["kind"] in ("ClusterRole", "Role")}
    out: set[tuple[str, str, str]] = set()
    problems: list[str] = []
    for binding in (d for d in objects if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if {"kind": "ServiceAccount", "name": "tether", "namespace": "tether-system"} not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], ns, ref["name"]))
        if role is None:
            problems.append(f"{binding['kind']}/{binding['metadata']['name']} refers to a missing {ref}")
            continue
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                if "*" in rule[field]:
                    problems.append(f"{role['kind']}/{role['metadata']['name']}: '*' in {field}")
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    base = resource.split("/")[0]
                    where = NAMESPACED_GRANTS.get((group, base))
                    if where is None and (binding["kind"] != "ClusterRoleBinding"
                                          or rule.get("resourceNames") != NAMED_GRANTS.get((group, base))):
                        problems.append(f"{group}/{resource} should be granted cluster-wide, with resourceNames "
                                        f"{NAMED_GRANTS.get((group, base))}")
                    if where is not None:
                        namespace, names = where
                        if (group, base) == ("", "configmaps") and rule.get("resourceNames") is None:
                            problems.append(f"{group}/{resource} should be limited by resourceNames")  # each by name
                        if binding["kind"] != "RoleBinding" or ns not in namespace.split("|"):
                            problems.append(f"{group}/{resource} should only be granted in namespace {namespace}")
                        if names is not None and rule.get("resourceNames") != names:
                            problems.append(f"{group}/{resource} should be limited to resourceNames {names}")
                    out |= {(group, resource, verb) for verb in rule["verbs"]}
    return out, problems


def test_rbac_grants_exactly_what_the_code_uses() -> None:
    have, problems = granted()
    assert not problems, "\n".join(problems)
    need = required_permissions()
    assert not need - have, f"missing permissions: {sorted(need - have)}"
    assert not have - need, f"permissions tether never uses: {sorted(have - need)}"


def test_host_rbac_grants_exactly_what_the_code_uses() -> None:
    """In the host cluster tether writes only the leader-only Services' EndpointSlices, by name."""
    objects = host_objects("everything")
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    assert [r["kind"] for r in roles] == ["Role"] and not [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    have = {(g, r, v) for rule in roles[0]["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}
    assert have == set().union(*HOST_CALL_SITES.values())
    named = {v for rule in roles[0]["rules"] if rule.get("resourceNames") for v in rule["verbs"]}
    assert named == {"get", "update"}  # only create cannot be limited by name


def test_rbac_spot_checks() -> None:
    have, _ = granted()
    claims = {v for g, r, v in have if r == "datasourceclaims"}
    assert "update" not in claims and "create" not in claims and "delete" not in claims
    assert not {v for g, r, v in have if r == "resourcebindings"} & {"create", "update", "delete"}
    assert not any(r == "pods" for _, r, _ in have)  # pods: in the members only
    # a Karmada Cluster's secretRef, read by name: get only (no list/watch of Secrets), and — granted() checks
    # NAMESPACED_GRANTS — only in Karmada's cluster-secret namespace
    assert {(g, v) for g, r, v in have if r == "secrets"} == {("", "get")}
    assert NAMESPACED_GRANTS[("", "secrets")] == ("karmada-cluster", None)
    workloads = {v for g, r, v in have if r in ("deployments", "jobs")}
    assert workloads <= {"list", "watch"}  # the workloads are read for their queue names, never written
    assert ("coordination.k8s.io", "leases", "update") in have
