"""tether's CRDs against the projects they stand in for, read from ``../shared/reference`` at test time.

* **Volcano Global** (``datadependency.volcano.sh``): tether serves the same API, so everything Volcano Global's CRDs
  accept must be accepted by tether's — walked property path by property path: every field is there (or kept as
  given), with the same type, no enum where Volcano Global has none (and a superset where it has one), no new
  constraint, the same default, and required lists that are subsets of Volcano Global's. tether may accept more,
  never less. Volcano Global's example manifests validate against tether's CRDs with the emulator's validator, and
  pruning keeps every field they set.
* **The upstream kinds** tether's sandbox registers (``ops/crds/upstream``, tether's minimal schemas): the same walk
  (nothing the real CRD accepts is refused), plus the other direction for the fields the minimal schema does type:
  each exists upstream with the same type and format, so a fact was carried over, not invented. Example manifests
  under ``../shared/reference`` validate against them too.

Skipped, with the path it looked for, when ``../shared`` is absent.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.adapters.sandbox.kube_emulator.schema import prune, validate_and_default
from tether.adapters.testing.reference import REFERENCE, missing_reason, reference_path
from tether.core import api

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "ops" / "crds"
VG = reference_path("volcano-global")
needs_reference = pytest.mark.skipif(VG is None, reason=missing_reason("volcano-global"))

#: Constraints that make a schema refuse values: tether's schema may only carry them where the reference does.
_CONSTRAINTS = ("pattern", "format", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
                "exclusiveMaximum", "minItems", "maxItems", "minProperties", "maxProperties")


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_docs(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=_Loader) if isinstance(d, dict)]


@functools.lru_cache(maxsize=8)
def crds_in(folder: Path) -> dict[str, dict[str, Any]]:
    """The CRDs under ``folder`` by name (cached: Karmada's are large; callers must not mutate them)."""
    return {d["metadata"]["name"]: d for p in sorted(folder.rglob("*.yaml")) for d in load_docs(p)
            if d.get("kind") == "CustomResourceDefinition"}


def schema_of(crd: dict[str, Any], version: str) -> dict[str, Any]:
    found = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert found, f"{crd['metadata']['name']} serves no {version}"
    schema: dict[str, Any] = found[0]["schema"]["openAPIV3Schema"]
    return schema


def storage_version(crd: dict[str, Any]) -> str:
    name: str = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    return name


def _preserves(node: dict[str, Any]) -> bool:
    return bool(node.get("x-kubernetes-preserve-unknown-fields"))


def refusals(ours: dict[str, Any], theirs: dict[str, Any], path: str = "") -> Iterator[str]:
    """What ``theirs`` accepts that ``ours`` would refuse, or silently drop, or store differently."""
    where = path or "<root>"
    if theirs.get("x-kubernetes-int-or-string"):
        if not ours.get("x-kubernetes-int-or-string"):
            yield f"{where}: int-or-string there, {ours.get('type')} here"
    elif theirs.get("type") and ours.get("type") != theirs["type"] and not ours.get("x-kubernetes-int-or-string") \
            and not (ours.get("type") == "number" and theirs["type"] == "integer"):
        yield f"{where}: type {theirs['type']} there, {ours.get('type')} here"
        return
    if "enum" in ours and ("enum" not in theirs or not set(theirs["enum"]) <= set(ours["enum"])):
        yield f"{where}: enum {ours['enum']} here, {theirs.get('enum', 'any value')} there"
    extra_required = set(ours.get("required") or ()) - set(theirs.get("required") or ())
    if extra_required:
        yield f"{where}: requires {sorted(extra_required)}, which are optional there"
    for key in _CONSTRAINTS:
        if key in ours and ours[key] != theirs.get(key):
            yield f"{where}: {key} {ours[key]!r} here, {theirs.get(key)!r} there"
    if theirs.get("nullable") and not ours.get("nullable"):
        yield f"{where}: nullable there, not here"
    if ("default" in ours or "default" in theirs) and ours.get("default") != theirs.get("default"):
        yield f"{where}: default {ours.get('default')!r} here, {theirs.get('default')!r} there"
    if ours.get("x-kubernetes-list-type") in ("set", "map") and \
            theirs.get("x-kubernetes-list-type") != ours["x-kubernetes-list-type"]:
        yield f"{where}: list-type {ours['x-kubernetes-list-type']} refuses duplicates the reference accepts"
    if _preserves(ours) and not ours.get("properties") and not isinstance(ours.get("additionalProperties"), dict):
        return  # kept as given, whatever is inside
    our_props = ours.get("properties") or {}
    our_addl = ours.get("additionalProperties")
    for name, sub in (theirs.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        if path == "" and name == "metadata":
            continue  # the API server owns metadata
        if name in our_props:
            yield from refusals(our_props[name], sub, here)
        elif isinstance(our_addl, dict):
            yield from refusals(our_addl, sub, here)
        elif not _preserves(ours) and our_addl is not True:
            yield f"{here}: not in tether's schema (it would be pruned)"
        elif "default" in sub:  # kept as given here, but a real API server stores its default when it is absent
            yield f"{here}: defaulted to {sub['default']!r} there, not typed here"
    if isinstance(theirs.get("additionalProperties"), dict):
        if isinstance(our_addl, dict):
            yield from refusals(our_addl, theirs["additionalProperties"], f"{path}[*]")
        elif not _preserves(ours):
            yield f"{where}: a map there, not here"
    if isinstance(theirs.get("items"), dict):
        if isinstance(ours.get("items"), dict):
            yield from refusals(ours["items"], theirs["items"], f"{path}[]")
        else:
            yield f"{where}: items there, not here"


def inventions(ours: dict[str, Any], theirs: dict[str, Any], path: str = "") -> Iterator[str]:
    """Fields ``ours`` types that ``theirs`` does not have, or types (or formats) differently."""
    where = path or "<root>"
    if _preserves(theirs) and not theirs.get("properties") and not theirs.get("items"):
        return  # the reference keeps anything here: nothing to hold our fields against
    for key in ("type", "format"):
        if ours.get(key) and theirs.get(key) and ours[key] != theirs[key]:
            yield f"{where}: {key} {ours[key]} here, {theirs[key]} there"
    if ours.get("x-kubernetes-int-or-string") != theirs.get("x-kubernetes-int-or-string"):
        yield f"{where}: int-or-string differs"
    their_props = theirs.get("properties") or {}
    for name, sub in (ours.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        if name in their_props:
            yield from inventions(sub, their_props[name], here)
        elif isinstance(theirs.get("additionalProperties"), dict):
            yield from inventions(sub, theirs["additionalProperties"], here)
        elif not _preserves(theirs) and not (path == "" and name == "metadata"):
            yield f"{here}: no such field there"
    if isinstance(ours.get("additionalProperties"), dict) and isinstance(theirs.get("additionalProperties"), dict):
        yield from inventions(ours["additionalProperties"], theirs["additionalProperties"], f"{path}[*]")
    if isinstance(ours.get("items"), dict) and isinstance(theirs.get("items"), dict):
        yield from inventions(ours["items"], theirs["items"], f"{path}[]")


# ------------------------------------------------------------------------------------------- the walk itself


def test_the_walk_finds_what_a_narrower_schema_refuses() -> None:
    theirs = {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "string"}, "b": {"type": "integer", "format": "int32"},
        "c": {"type": "array", "items": {"type": "string"}},
        "d": {"type": "object", "additionalProperties": {"type": "string"}}}}
    assert list(refusals(theirs, theirs)) == []
    narrower = {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "string", "enum": ["x"]}, "b": {"type": "string"},
        "c": {"type": "array", "items": {"type": "string", "maxLength": 3}}}}
    found = "\n".join(refusals(narrower, theirs))
    for expected in ("<root>: requires ['b']", "a: enum", "b: type integer there", "c[]: maxLength", "d: not in"):
        assert expected in found
    wider = {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
        "a": {"type": "string"}, "e": {"type": "boolean"}}}
    assert list(refusals(wider, theirs)) == []
    assert list(inventions(wider, theirs)) == ["e: no such field there"]


# ----------------------------------------------------------------------------------------------- Volcano Global


def vg_crds() -> dict[str, dict[str, Any]]:
    assert VG is not None
    return crds_in(VG)


def tether_crds() -> dict[str, dict[str, Any]]:
    return {n: d for n, d in crds_in(CRDS).items() if n.endswith(".datadependency.volcano.sh")}


@needs_reference
def test_tether_serves_every_kind_and_version_volcano_global_defines() -> None:
    ours, theirs = tether_crds(), vg_crds()
    assert set(theirs) <= set(ours)
    for name, crd in theirs.items():
        mine = ours[name]["spec"]
        assert (mine["group"], mine["scope"], mine["names"]["kind"], mine["names"]["plural"]) == \
            (crd["spec"]["group"], crd["spec"]["scope"], crd["spec"]["names"]["kind"], crd["spec"]["names"]["plural"])
        assert {v["name"] for v in crd["spec"]["versions"]} <= {v["name"] for v in mine["versions"]}
        for version in crd["spec"]["versions"]:
            served = next(v for v in mine["versions"] if v["name"] == version["name"])
            assert (served.get("subresources") or {}) == (version.get("subresources") or {}), name


@needs_reference
@pytest.mark.parametrize("name", [f"{k.plural}.{api.GROUP}" for k in api.KINDS])
def test_tether_accepts_everything_volcano_global_accepts(name: str) -> None:
    theirs = vg_crds()[name]
    ours = tether_crds()[name]
    for version in theirs["spec"]["versions"]:
        problems = list(refusals(schema_of(ours, version["name"]), version["schema"]["openAPIV3Schema"]))
        assert not problems, f"{name} {version['name']}:\n" + "\n".join(problems)


def example_manifests(folder: Path, groups: set[str]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{p.name}:{d['kind']}/{d['metadata']['name']}", d) for p in sorted(folder.rglob("*.yaml"))
            for d in load_docs(p)
            if d.get("kind") != "CustomResourceDefinition" and str(d.get("apiVersion", "")).split("/")[0] in groups]


def check_manifest(doc: dict[str, Any], crds: dict[str, dict[str, Any]]) -> list[str]:
    group, _, version = doc["apiVersion"].rpartition("/")
    crd = next((c for c in crds.values()
                if c["spec"]["group"] == group and c["spec"]["names"]["kind"] == doc["kind"]), None)
    if crd is None:
        return [f"no CRD for {doc['apiVersion']} {doc['kind']}"]
    schema = schema_of(crd, version)
    _, causes = validate_and_default(doc, schema)
    problems = [f"{path}: {message}" for path, _, message in causes]
    # Pruning may drop only what is null (the API server drops null for non-nullable fields too).
    if prune(doc, schema, root=True) != prune(_without_nulls(doc), None, root=True):
        problems.append("pruning drops fields the example sets")
    return problems


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


@needs_reference
def test_volcano_globals_examples_validate_against_tethers_crds() -> None:
    assert VG is not None
    examples = example_manifests(VG, {"datadependency.volcano.sh"})
    assert examples, f"no datadependency.volcano.sh example under {VG}"
    for label, doc in examples:
        problems = check_manifest(doc, tether_crds())
        assert not problems, f"{label}:\n" + "\n".join(problems)


async def test_volcano_globals_claim_example_is_served_by_the_emulator(kube: Any) -> None:
    assert kube is not None
    if VG is None:
        pytest.skip(missing_reason("volcano-global"))
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    doc = next(d for _, d in example_manifests(VG, {"datadependency.volcano.sh"}) if d["kind"] == "DataSourceClaim")
    doc = {**doc, "metadata": {**doc["metadata"], "namespace": kube.namespace}}
    created = await kube.custom.create_namespaced_custom_object("datadependency.volcano.sh", "v1alpha1",
                                                                kube.namespace, "datasourceclaims", doc)
    assert created["spec"] == doc["spec"]


# ------------------------------------------------------------------------------------------- upstream kinds

UPSTREAM = sorted((CRDS / "upstream").glob("*.yaml"))


def upstream_reference() -> dict[str, dict[str, Any]]:
    return crds_in(REFERENCE)


@pytest.mark.skipif(reference_path() is None, reason=missing_reason())
@pytest.mark.parametrize("path", UPSTREAM, ids=lambda p: p.name)
def test_minimal_upstream_schemas_agree_with_the_real_crds(path: Path) -> None:
    (ours,) = [d for d in load_docs(path) if d.get("kind") == "CustomResourceDefinition"]
    name = ours["metadata"]["name"]
    theirs = upstream_reference().get(name)
    assert theirs is not None, f"no CRD {name} under {REFERENCE}"
    spec, ref = ours["spec"], theirs["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"]) == (ref["group"], ref["scope"], ref["names"]["kind"])
    version = storage_version(ours)
    assert version == storage_version(theirs)
    served = next(v for v in spec["versions"] if v["name"] == version)
    reference_version = next(v for v in ref["versions"] if v["name"] == version)
    assert (served.get("subresources") or {}) == (reference_version.get("subresources") or {})
    mine, real = schema_of(ours, version), schema_of(theirs, version)
    problems = [*(f"refuses: {p}" for p in refusals(mine, real)), *(f"invents: {p}" for p in inventions(mine, real))]
    assert not problems, f"{name}:\n" + "\n".join(problems)


@pytest.mark.skipif(reference_path() is None, reason=missing_reason())
def test_upstream_examples_validate_against_the_minimal_schemas() -> None:
    ours = crds_in(CRDS / "upstream")
    groups = {c["spec"]["group"] for c in ours.values()}
    examples = example_manifests(REFERENCE, groups)
    assert examples
    for label, doc in examples:
        problems = check_manifest(doc, ours)
        assert not problems, f"{label}:\n" + "\n".join(problems)
