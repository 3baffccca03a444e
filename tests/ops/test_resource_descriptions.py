"""One description per resource: the DataSourceClaim and DataSource kinds are ``core/api.py``, and everything else
follows it.

* the CRDs are generated from it (``tests/ops/test_crd_generation.py`` fails when the committed files drift);
* the reader (``core/world/views.py``) decodes a projection of it: every field a reader struct decodes must be a field
  of the kind's struct it is declared to read (``views.READS``), under the same wire name, of the same type;
* the writers (``adapters/kubernetes/manifests.py``, and the executors' status and locality writes, here the fake
  cluster's, which ``tests/integration/test_executor_contract.py`` holds to the real executor's) write through it:
  what they write the committed CRD accepts, and the reader reads back as it was written.

So a field renamed, retyped or added in one place and not the others fails here.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from tether.adapters.kubernetes import manifests
from tether.adapters.sandbox.kube_emulator.schema import validate_and_default, validate_status_and_default
from tether.adapters.testing.fake_cluster import FakeCluster
from tether.core import api
from tether.core.commands import (
    Command,
    CreateDataSource,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    command_id,
    command_target,
)
from tether.core.envelope import CommandRecord
from tether.core.identity import make_identity
from tether.core.keys import LOCATION_ANNOTATION
from tether.core.kube import Condition, KubeObject, ObjectRef, trim
from tether.core.world import views

ROOT = Path(__file__).resolve().parents[2]


def crd_schema(kind: api.ApiKind) -> dict[str, Any]:
    with (ROOT / "ops" / "crds" / f"{api.GROUP}_{kind.plural}.yaml").open() as f:
        crd = next(d for d in yaml.safe_load_all(f) if d)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


# --- the reader reads the kinds' fields -------------------------------------------------------------------------


def shape(tp: Any) -> Any:
    """A type as the wire sees it: optional, annotated and sequence forms folded (``list[X]``, ``tuple[X, ...]``
    → ``("seq", X)``), a reader struct replaced by the kind's struct it reads; ``msgspec.Raw`` reads anything."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return shape(args[0])
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return shape(kept[0]) if len(kept) == 1 else tuple(shape(a) for a in kept)
    if origin in (list, tuple):
        return ("seq", shape(args[0]))
    if origin is dict:
        return ("map", shape(args[0]), shape(args[1]))
    if origin is typing.Literal:
        return type(args[0])
    if tp is msgspec.Raw:
        return "any"
    return views.READS.get(tp, tp)


def wire_fields(struct: type[msgspec.Struct]) -> dict[str, Any]:
    hints = typing.get_type_hints(struct, include_extras=True)
    return {field.encode_name: shape(hints[field.name]) for field in msgspec.structs.fields(struct)}


def disagreements(reader: type[msgspec.Struct], kind: type[msgspec.Struct]) -> list[str]:
    published = wire_fields(kind)
    found = []
    for name, read in wire_fields(reader).items():
        if name not in published:
            found.append(f"{reader.__name__}.{name}: not a field of {kind.__name__}")
        elif read != "any" and read != published[name]:
            found.append(f"{reader.__name__}.{name}: read as {read}, published as {published[name]}")
    return found


@pytest.mark.parametrize("reader", list(views.READS), ids=lambda reader: reader.__name__)
def test_every_field_a_reader_decodes_is_a_field_of_its_kind(reader: type[msgspec.Struct]) -> None:
    assert disagreements(reader, views.READS[reader]) == []


def test_a_reader_field_the_kind_does_not_describe_is_found() -> None:
    """The check itself: a field renamed on one side, or read as another type, is a disagreement."""

    class Renamed(msgspec.Struct, rename="camel"):
        data_source_name: str = ""
        workload_name: str = ""

    class Retyped(msgspec.Struct, rename="camel"):
        bound_claims: str = ""

    assert disagreements(Renamed, api.DataSourceClaimSpec) == [
        "Renamed.workloadName: not a field of DataSourceClaimSpec"]
    assert disagreements(Retyped, api.DataSourceStatus) == [
        "Retyped.boundClaims: read as <class 'str'>, published as <class 'int'>"]


def test_the_readers_cover_both_kinds_specs_and_statuses() -> None:
    assert {api.DataSourceClaimSpec, api.DataSourceClaimStatus, api.DataSourceSpec, api.DataSourceStatus} <= set(
        views.READS.values())


# --- what tether writes, the CRD accepts and the reader reads back ----------------------------------------------


def _applied(cluster: FakeCluster, command: Command) -> None:
    record = CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                           causation="0:0")
    outcome = cluster.apply(record)
    assert outcome and outcome[0][1].__class__.__name__ == "CommandSucceeded", outcome


def test_a_claim_tether_writes_is_valid_and_reads_back_as_written() -> None:
    raw = manifests.claim("c1", namespace="ns", table="prod.sales.orders", attributes={"branch": "main"},
                          workload="trainer", workload_kind="Job", workload_api_version="batch.volcano.sh/v1alpha1",
                          workload_namespace="jobs")
    stored, causes = validate_and_default(raw, crd_schema(api.DATASOURCECLAIM))
    assert causes == [] and stored["spec"] == raw["spec"]
    cluster = FakeCluster()
    obj = cluster.put(stored)
    claim = views.parse_claim(obj)
    assert claim.problem == ""
    assert claim.identity == make_identity("amoro", "table", "prod.sales.orders", {"branch": "main"})
    assert claim.workload == views.workload_key("batch.volcano.sh/v1alpha1", "Job", "jobs", "trainer")

    condition = Condition(type="Bound", status="True", reason="DataSourceBound", message="bound",
                          last_transition_time="2026-01-01T00:00:00Z", observed_generation=1)
    _applied(cluster, UpdateClaimStatus(claim=claim.ref, phase="Bound", bound_data_source="ds-1",
                                        conditions=(condition,)))
    written = cluster.get(claim.ref.key)
    assert written is not None
    _, causes = validate_status_and_default(written, crd_schema(api.DATASOURCECLAIM))
    assert causes == []
    read = views.parse_claim(trim(written), claim)
    assert (read.phase, read.bound_data_source, read.conditions) == ("Bound", "ds-1", (condition,))


def test_a_datasource_tether_writes_is_valid_and_reads_back_as_written() -> None:
    identity = make_identity("amoro", "table", "prod.sales.orders", {"branch": "main"})
    create = CreateDataSource(name="ds-1", identity=identity, cluster_names=("east-1", "east-2"),
                              location="s3://warehouse-east/orders", reclaim_policy="Delete")
    raw = manifests.data_source_manifest(create)
    stored, causes = validate_and_default(raw, crd_schema(api.DATASOURCE))
    assert causes == [] and stored["spec"] == raw["spec"]
    cluster = FakeCluster()
    source = views.parse_source(cluster.put(stored))
    assert (source.identity, source.cluster_names, source.location, source.reclaim_policy) == (
        identity, ("east-1", "east-2"), "s3://warehouse-east/orders", "Delete")

    refs = (ObjectRef(api_version=api.DATASOURCECLAIM.api_version, kind="DataSourceClaim", name="c1", namespace="ns",
                      uid="u1"),)
    _applied(cluster, UpdateDataSourceStatus(name="ds-1", claim_refs=refs, bound_claims=1))
    _applied(cluster, UpdateDataSourceLocality(name="ds-1", cluster_names=("west-1",), location="s3://west/orders"))
    written = cluster.get(source.ref.key)
    assert written is not None
    _, causes = validate_status_and_default(written, crd_schema(api.DATASOURCE))
    assert causes == [] and validate_and_default(written, crd_schema(api.DATASOURCE))[1] == []
    read = views.parse_source(trim(written), source)
    assert (read.claim_refs, read.bound_claims, read.cluster_names, read.location) == (
        refs, 1, ("west-1",), "s3://west/orders")
    assert written["metadata"]["annotations"][LOCATION_ANNOTATION] == "s3://west/orders"


def test_the_writer_writes_through_the_kinds_types() -> None:
    """The manifests are the kinds' structs, encoded: decoding them back with the types gives what was put in."""
    claim = manifests.claim("c1", table="t", attributes={"a": "b"})
    spec = msgspec.convert(claim["spec"], api.DataSourceClaimSpec)
    assert msgspec.to_builtins(spec) == claim["spec"] and spec.attributes == {"a": "b"}
    source = manifests.data_source_manifest(CreateDataSource(name="n", identity=make_identity("s", "t", "n", {}),
                                                             cluster_names=(), location="l"))
    assert msgspec.to_builtins(msgspec.convert(source["spec"], api.DataSourceSpec)) == source["spec"]
    assert (claim["apiVersion"], claim["kind"], source["kind"]) == (api.DATASOURCECLAIM.api_version,
                                                                    api.DATASOURCECLAIM.kind, api.DATASOURCE.kind)
    assert isinstance(trim(claim), KubeObject)
