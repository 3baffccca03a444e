"""The decider's shortcuts give exactly what the plain computations give (memos, dispatch tables)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from tether.core import commands as c
from tether.core import identity as ident
from tether.core.envelope import rfc3339
from tether.core.kube import ObjectRef, object_key

REF = ObjectRef(api_version="datadependency.volcano.sh/v1alpha1", kind="DataSourceClaim", name="a", namespace="n",
                uid="u")
IDENTITY = ident.make_identity("amoro", "table", "prod.db.T_1", {"k": "v"})


def _plain_rfc3339(at_ms: int) -> str:
    return dt.datetime.fromtimestamp(at_ms // 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@given(st.lists(st.integers(min_value=-10_000, max_value=4_102_444_800_000), max_size=20))
def test_rfc3339_memo_answers_for_its_own_second_only(times: list[int]) -> None:
    for at_ms in times + [t + 1 for t in times] + [-1, 0, -1, 999, 1000, -1000, -1001]:
        assert rfc3339(at_ms) == _plain_rfc3339(at_ms)


def test_command_target_table_matches_the_match() -> None:
    commands: list[c.Command] = [
        c.AddFinalizer(target=REF, finalizer="f"),
        c.RemoveFinalizer(target=REF, finalizer="f"),
        c.UpdateClaimStatus(claim=REF, phase="Bound", bound_data_source="ds", conditions=()),
        c.UpdateDataSourceStatus(name="ds", claim_refs=(REF,), bound_claims=1),
        c.CreateDataSource(name="ds", identity=IDENTITY, cluster_names=("m1",), location="s3://x"),
        c.UpdateDataSourceLocality(name="ds", cluster_names=("m1",), location="s3://x"),
        c.DeleteDataSource(name="ds", uid="u"),
        c.SetBindingPlacement(binding=REF, excluded_clusters=("m2",)),
        c.LookupDataLocation(identity=IDENTITY),
        c.StartTimer(timer_id="t", fire_at_ms=1, purpose="p", subject="Data/x"),
        c.EmitKubernetesEvent(involved=REF, event_type="Normal", reason="r", message="m"),
    ]
    assert {type(command) for command in commands} == set(c.COMMAND_TYPES)
    for command in commands:
        assert c.command_target(command) == c._target_by_match(command)


def test_object_ref_key_is_object_key() -> None:
    for ref in (REF, ObjectRef(api_version="v1", kind="Cluster", name="m1")):
        assert ref.key == object_key(ref.kind, ref.namespace, ref.name)


@given(st.text(max_size=12), st.text(max_size=12), st.text(max_size=30),
       st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
def test_data_source_name_cache_is_the_plain_function(system: str, type_: str, name: str,
                                                      attributes: dict[str, str]) -> None:
    identity = ident.make_identity(system, type_, name, attributes)
    expected = ident._data_source_name(identity)
    assert ident.data_source_name(identity) == expected
    assert ident.data_source_name(ident.make_identity(system, type_, name, attributes)) == expected  # cached


def test_identity_key() -> None:
    assert ident.make_identity("amoro", "table", "a.b", None).key == "amoro/table/a.b"
    assert IDENTITY.key == "amoro/table/prod.db.T_1?k=v"
