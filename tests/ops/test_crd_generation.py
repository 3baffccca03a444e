"""The CRDs in ``ops/crds`` are exactly what ``ops/crds/generate.py`` writes, and the generator's rules hold.

The generator is a script, not a module of the package, so it is loaded from its path.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import msgspec
import pytest
import yaml

from tether.core import api
from tether.core.kube import as_json

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ops" / "crds" / "generate.py"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tether_crd_generator", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def test_committed_crds_equal_a_fresh_generation() -> None:
    for path, text in gen.render().items():
        assert path.exists(), f"{path.relative_to(ROOT)} is not committed: run `python ops/crds/generate.py`"
        assert path.read_text(encoding="utf-8") == text, \
            f"{path.relative_to(ROOT)} differs from its generation: run `python ops/crds/generate.py`"


def test_every_crd_file_is_generated() -> None:
    generated = set(gen.render())
    on_disk = {p for p in (ROOT / "ops" / "crds").rglob("*.yaml") if p.name != "kustomization.yaml"}
    on_disk |= set((ROOT / "ops" / "chart" / "files" / "crds").glob("*.yaml"))  # the chart's copies
    assert on_disk == generated


def test_check_mode_exits_zero_from_any_directory(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_mode_reports_a_stale_file(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = gen.render

    def stale() -> dict[Path, str]:
        files = real()
        first = next(iter(files))
        return files | {first: files[first] + "# changed\n"}

    monkeypatch.setattr(gen, "render", stale)
    assert gen.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().out


# -------------------------------------------------------------------------------------------- the conversion


class _Inner(msgspec.Struct, kw_only=True, rename="camel"):
    """Not published."""

    some_name: Annotated[str, msgspec.Meta(description="published")]
    count: int = 0


class _Outer(msgspec.Struct, kw_only=True, rename="camel"):
    inner: Annotated[_Inner, msgspec.Meta(description="the inner one")]
    maybe: _Inner | None = None
    phase: str = "Pending"
    labels: dict[str, str] = {}
    items: list[_Inner] = []


def test_structural_inlines_refs_collapses_optionals_and_keeps_only_meaningful_defaults() -> None:
    schema = gen.structural(msgspec.json.schema(_Outer))
    inner = {"type": "object", "required": ["someName"], "properties": {
        "someName": {"type": "string", "description": "published"}, "count": {"type": "integer"}}}
    assert schema == {"type": "object", "required": ["inner"], "properties": {
        "inner": inner | {"description": "the inner one"},
        "maybe": inner,
        "phase": {"type": "string", "default": "Pending"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "items": {"type": "array", "items": inner},
    }}


def test_structural_refuses_what_the_api_server_would() -> None:
    class Union(msgspec.Struct):
        value: int | str

    class Tuple(msgspec.Struct):
        pair: tuple[int, str]

    for bad in (Union, Tuple):
        with pytest.raises(ValueError):
            gen.structural(msgspec.json.schema(bad))


# ------------------------------------------------------------------------------------------------ the types


def test_the_types_decode_the_objects_tether_writes_and_the_crd_accepts_them() -> None:
    from tether.adapters.kubernetes import manifests
    from tether.adapters.sandbox.kube_emulator.schema import validate_and_default

    claim = manifests.claim("c", namespace="ns", table="prod.sales.orders")
    spec = msgspec.convert(claim["spec"], api.DataSourceClaimSpec)
    assert (spec.system, spec.data_source_name, spec.workload.kind) == ("amoro", "prod.sales.orders", "Deployment")
    assert as_json(spec) == claim["spec"]
    with (ROOT / "ops" / "crds" / "datadependency.volcano.sh_datasourceclaims.yaml").open() as f:
        crd = next(d for d in yaml.safe_load_all(f) if d)
    stored, causes = validate_and_default(claim, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert causes == []
    assert stored["spec"] == claim["spec"]


def test_the_published_condition_is_the_one_tether_writes() -> None:
    """One Condition type: the CRDs publish ``core.kube.Condition`` (its fields, with Kubernetes' value checks), and a
    condition tether writes decodes with it unchanged."""
    import typing

    from tether.core.kube import Condition

    assert typing.get_args(api.ConditionItem)[0] is Condition
    fields = {field.encode_name for field in msgspec.structs.fields(Condition)}
    for kind in api.KINDS:
        with (ROOT / "ops" / "crds" / f"{api.GROUP}_{kind.plural}.yaml").open() as f:
            crd = next(d for d in yaml.safe_load_all(f) if d)
        status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        published = status["properties"]["conditions"]["items"]
        assert set(published["properties"]) == fields
        assert sorted(published["required"]) == ["reason", "status", "type"]
        assert published["properties"]["status"]["enum"] == ["False", "True", "Unknown"]
        assert published["properties"]["observedGeneration"]["minimum"] == 0
    written = Condition(type="Bound", status="False", reason="DataSourceNotFound", message="m",
                        last_transition_time="2026-01-01T00:00:00Z", observed_generation=3)
    assert as_json(msgspec.convert(as_json(written), Condition)) == as_json(written)


def test_short_names_avoid_built_in_kinds() -> None:
    built_in = {"ds", "deploy", "rs", "sts", "po", "svc", "cm", "ns", "no", "pv", "pvc", "sa", "ep", "ev", "hpa",
                "pdb", "crd", "crds", "cs", "csr", "ing", "limits", "netpol", "pc", "psp", "quota", "rc", "sc"}
    names: list[Any] = [n for shown in gen.PRESENTATION.values() for n in shown["short_names"]]
    assert names == ["dsc", "dsrc"]
    assert not set(names) & built_in
