"""The decider's shortcuts give exactly what the plain computations give (memos, dispatch tables)."""

from __future__ import annotations

import copy
import datetime as dt
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core import commands as c
from tether.core import identity as ident
from tether.core.admission.decider import binding_observed, decide_binding_events
from tether.core.commands import CreateDataSource
from tether.core.datadependency.decider import DecisionPass, decide
from tether.core.decision import Decision
from tether.core.envelope import CommandRecord, EventRecord, encode, parse_rfc3339_ms, rfc3339
from tether.core.events import CommandFailed, DataLocationResolved, ObjectObserved
from tether.core.identity import make_identity
from tether.core.kube import Condition, ObjectRef, object_key
from tether.core.world import Touched, World, initial_world, slot
from tether.projections import step as step_module
from tether.projections.fold import evolve, note_issued
from tether.projections.snapshot import encode_world
from tether.projections.step import _retry_failed, step

REF = ObjectRef(api_version="datadependency.volcano.sh/v1alpha1", kind="DataSourceClaim", name="a", namespace="n",
                uid="u")
IDENTITY = ident.make_identity("amoro", "table", "prod.db.T_1", {"k": "v"})


def _plain_rfc3339(at_ms: int) -> str:
    return dt.datetime.fromtimestamp(at_ms // 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@given(st.lists(st.integers(min_value=-10_000, max_value=4_102_444_800_000), max_size=20))
def test_rfc3339_memo_answers_for_its_own_second_only(times: list[int]) -> None:
    for at_ms in times + [t + 1 for t in times] + [-1, 0, -1, 999, 1000, -1000, -1001]:
        assert rfc3339(at_ms) == _plain_rfc3339(at_ms)


def test_rfc3339_parses_back_and_a_time_without_a_zone_is_utc_in_any_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A creationTimestamp or a ``tether replay --until`` typed without ``Z`` means UTC, not the zone of the
    machine that happens to read it."""
    noon = int(dt.datetime(2026, 1, 2, 12, 0, 5, tzinfo=dt.UTC).timestamp() * 1000)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert parse_rfc3339_ms(rfc3339(noon)) == noon
        assert parse_rfc3339_ms("2026-01-02T12:00:05") == noon
        assert parse_rfc3339_ms("2026-01-02T14:00:05.250+02:00") == noon + 250
        assert parse_rfc3339_ms("yesterday") is None
    finally:
        monkeypatch.undo()
        time.tzset()


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
        c.SetBindingTiers(binding=REF, terms=(c.TierTerm(name="data-0", tier="data", user_term=0, clusters=("m1",)),)),
        c.LookupDataLocation(identity=IDENTITY),
        c.StartTimer(timer_id="t", fire_at_ms=1, purpose="p", subject="Data/x"),
        c.EmitKubernetesEvent(involved=REF, event_type="Normal", reason="r", message="m"),
        c.ReleasePod(cluster="m1", pod=REF, gate="g"),
        c.SetMemberCondition(cluster="m1", target=REF, condition=Condition(type="T", status="True", reason="R")),
        c.EmitMemberEvent(cluster="m1", involved=REF, event_type="Normal", reason="r", message="m"),
        c.ResumeBinding(binding=REF, admitted_request=(("cpu", "1"),)),
        c.SetAdmissionHold(binding=REF, annotation="a", text="t"),
        c.SetAdmissionChecks(binding=REF, checks=(c.CheckStatus(name="data-bound", state="Ready"),)),
        c.UpdateQueueStatus(queue=REF, allocated=(), pending=0, running=0, inqueue=0),
        c.CreateQueue(name="default"),
        c.EvictBinding(binding=REF, for_binding="ns/b", queue="q", policy="preempt", reason="r"),
        c.SuspendDispatching(binding=REF, reason="r"),
        c.AdmitRequest(binding=REF, admitted_request=(("cpu", "1"),)),
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


# --- step's shortcuts: a history with commands in flight, decided with and without them -------------------------

def _history() -> list[EventRecord]:
    """Claims, bindings and DataSources in bursts (events fed while commands are in flight, so decisions repeat
    commands already in flight), a reschedule, a migration, two live DataSources for one identity, deletions."""
    h = Harness()
    for name in ("c1", "c2", "c3"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"],
                                                                 "s3://west/": ["c3"]})}))
    for table, region in (("t0", "east"), ("t1", "east"), ("t2", "west")):
        h.cluster.catalog[f"amoro/table/db.{table}"] = f"s3://{region}/db/{table}"

    def burst(raws: list[dict[str, Any]]) -> None:
        for raw in raws:
            h.feed(ObjectObserved(obj=h.cluster.put(raw)))
        h.settle()

    burst([m.resource_binding(w, namespace=ns) for ns in ("n0", "n1") for w in ("w0", "w1")])
    burst([m.claim(f"k{i}", namespace=ns, table=f"db.t{i % 3}", workload=f"w{i % 2}")
           for ns in ("n0", "n1") for i in range(6)])
    burst([m.claim(f"k{i}", namespace="n0", table="db.t0", workload="w1") for i in range(6, 9)])
    binding = copy.deepcopy(h.obj("ResourceBinding", "n0", "w0-deployment"))
    assert binding is not None
    binding["spec"]["clusters"] = [{"name": "c3", "replicas": 1}]  # where t0's data is not: rescheduled
    burst([binding])
    h.cluster.catalog["amoro/table/db.t0"] = "s3://west/db/t0/v2"
    h.feed(DataLocationResolved(identity=make_identity("amoro", "table", "db.t0", None),
                                location="s3://west/db/t0/v2", trigger="push"), source="catalog")
    h.settle()
    other = m.data_source_manifest(CreateDataSource(  # a second DataSource caching t1, made by someone else
        name="zz-t1-copy", identity=make_identity("amoro", "table", "db.t1", None), cluster_names=("c1",),
        location="s3://east/db/t1"))
    burst([other, m.claim("k9", namespace="n1", table="db.t1", workload="w0")])
    for ns, name in (("n0", "k1"), ("n1", "k2"), ("n0", "k7")):
        h.delete("DataSourceClaim", ns, name)
    h.delete("ResourceBinding", "n1", "w1-deployment")
    return h.events


def _plain_step(world: World, record: EventRecord, dropped: list[c.Command]) -> list[CommandRecord]:
    """``step`` as plain computation: ids, targets and slots computed from each command, nothing precomputed."""
    observed = binding_observed(world, record)
    touched = evolve(world, record)
    decisions = decide(world, record, touched)
    if observed is not None:
        decisions = decide_binding_events(world, record, observed) + decisions
    if isinstance(record.event, CommandFailed):
        decisions = _retry_failed(world, record) + decisions
    out = []
    for decision in decisions:
        command = decision.command
        cid, target = c.command_id(command), c.command_target(command)
        if world.inflight.get(slot(c.command_name(command), target)) == cid:
            dropped.append(command)
            continue
        if isinstance(command, c.StartTimer) and command.timer_id in world.timers:
            continue
        note_issued(world, command, cid)
        out.append(CommandRecord(id=cid, at_ms=record.at_ms, key=target, command=command,
                                 causation=f"{record.partition}:{record.offset}", reason=decision.reason,
                                 decider=decision.decider))
    return out


def test_step_with_shortcuts_issues_what_the_plain_computation_issues(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _history()
    checked = []

    def checking_decide(world: World, record: EventRecord, touched: Touched) -> list[Decision]:
        decisions = decide(world, record, touched)
        for d in decisions:  # what the decider precomputed is what step would compute
            assert (d.id, d.key) == (c.command_id(d.command), c.command_target(d.command))
            assert d.slot == slot(c.command_name(d.command), d.key)
        d = DecisionPass(world, record)
        for source in world.sources.values():  # bound_claims' shortcut (one live DataSource) is the plain one
            checked.append(len(world.sources_by_identity.get(source.identity.key, ())) if source.identity else 0)
            assert d.bound_claims(source) == d._bound_claims_plain(source)
        return decisions

    fast = initial_world()
    with monkeypatch.context() as patch:
        patch.setattr(step_module, "decide", checking_decide)
        issued = [encode(r) for e in events for r in step(fast, e)]
    assert max(checked) == 2  # (both paths of bound_claims were compared)

    plain = initial_world()
    dropped: list[c.Command] = []
    with monkeypatch.context() as patch:
        patch.setattr(DecisionPass, "shortcuts", False)
        patch.setattr(DecisionPass, "bound_claims", DecisionPass._bound_claims_plain)
        expected = [encode(r) for e in events for r in _plain_step(plain, e, dropped)]
    assert issued == expected
    assert encode_world(fast) == encode_world(plain)
    # the history does exercise the in-flight shortcut: the plain decider repeated both kinds of commands
    assert {type(command) for command in dropped} >= {c.SetBindingPlacement}


def test_memoised_commands_are_those_of_their_observation() -> None:
    """The command memoised on a binding view (``placing``) is rebuilt when asked anew; a claim memoises none."""
    events = _history()
    world = initial_world()
    seen = 0
    for record in events:
        step(world, record)
        assert not any("adding" in claim.__dict__ for claim in world.claims.values())
        for binding in world.bindings.values():
            placing = binding.__dict__.get("placing")
            if placing is not None:
                seen += 1
                desired, reschedule, command, cid, target, at = placing
                assert command == c.SetBindingPlacement(
                    binding=binding.ref, excluded_clusters=tuple(sorted(desired or ())),
                    injected=desired is not None, reschedule_at=reschedule)
                assert (cid, target, at) == (c.command_id(command), c.command_target(command),
                                             slot("set_binding_placement", target))
    assert seen
