"""One behaviour per plugin (priority, gang, capacity, proportion, drf, datadependency), tiers and queue problems."""

from __future__ import annotations

from tether.core.admission.config import parse_admission_config
from tether.core.admission.model import Binding, ClusterCapacity
from tether.core.admission.session import admission_cycle
from tether.core.world.admission_state import AdmissionConfig, Queue

CPU = 1000  # milli-units per core


def config(*tiers: list[str], actions: str = "enqueue, allocate") -> AdmissionConfig:
    body = "".join("- plugins:\n" + "".join(f"  - name: {p}\n" for p in tier) for tier in tiers)
    return parse_admission_config(f'actions: "{actions}"\ntiers:\n{body}')


def cluster(cpu: int, allocated: int = 0, *, ready: bool = True, name: str = "member1") -> ClusterCapacity:
    return ClusterCapacity(name=name, allocatable={"cpu": cpu * CPU}, allocated={"cpu": allocated * CPU}, ready=ready)


def rb(name: str, queue: str = "q", *, cpu: float = 1, created: int = 0, priority: int = 0, replicas: int = 1,
       suspended: bool = True, **extra: object) -> Binding:
    return Binding(key=f"ns/{name}", queue=queue, request={"cpu": int(cpu * CPU)}, creation_ms=created,
                   uid=f"uid-{name}", priority=priority, replicas=replicas, suspended=suspended, **extra)  # type: ignore[arg-type]


def held(out: object) -> dict[str, tuple[str, str]]:
    return {h.binding: (h.plugin, h.reason) for h in out.held}  # type: ignore[attr-defined]


# --- priority ------------------------------------------------------------------------------------------------


def test_priority_orders_bindings_before_creation_time() -> None:
    bindings = [rb("old-low", created=1), rb("new-high", created=2, priority=10), rb("mid", created=3, priority=5)]
    out = admission_cycle(queues=[Queue(name="q")], bindings=bindings, clusters=[cluster(10)],
                          config=config(["priority"]))
    assert out.resume == ("ns/new-high", "ns/mid", "ns/old-low")
    without = admission_cycle(queues=[Queue(name="q")], bindings=bindings, clusters=[cluster(10)],
                              config=config(["gang"]))
    assert without.resume == ("ns/old-low", "ns/new-high", "ns/mid")


def test_priority_orders_queues() -> None:
    queues = [Queue(name="a", creation_ms=1), Queue(name="b", creation_ms=2, priority=3)]
    bindings = [rb("a1", "a"), rb("a2", "a", created=1), rb("b1", "b"), rb("b2", "b", created=1)]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(10)], config=config(["priority"]))
    assert out.resume == ("ns/b1", "ns/a1", "ns/b2", "ns/a2")


def test_ties_fall_to_creation_then_uid_then_key() -> None:
    bindings = [Binding(key="ns/z", queue="q", uid="1"), Binding(key="ns/a", queue="q", uid="2"),
                Binding(key="ns/c", queue="q", uid="2"), Binding(key="ns/old", queue="q", uid="9", creation_ms=-1)]
    out = admission_cycle(queues=[Queue(name="q")], bindings=bindings, clusters=[cluster(1)])
    assert out.resume == ("ns/old", "ns/z", "ns/a", "ns/c")


# --- gang ----------------------------------------------------------------------------------------------------


def test_gang_needs_the_whole_request_without_it_one_replica_is_enough() -> None:
    queue = Queue(name="q", capability={"cpu": 3 * CPU})
    bindings = [rb("four", replicas=4)]
    with_gang = admission_cycle(queues=[queue], bindings=bindings, clusters=[cluster(10)],
                                config=config(["gang", "capacity"]))
    assert with_gang.resume == ()
    assert held(with_gang) == {"ns/four": ("capacity", "queue q: cpu 4/3")}
    without = admission_cycle(queues=[queue], bindings=bindings, clusters=[cluster(10)], config=config(["capacity"]))
    assert without.resume == ("ns/four",)
    assert without.queues[0].allocated == {"cpu": 4 * CPU}  # the whole request is charged all the same


def test_duplicated_copies_count_in_the_whole_request() -> None:
    queue = Queue(name="q", capability={"cpu": 5 * CPU})
    out = admission_cycle(queues=[queue], bindings=[rb("dup", replicas=2, copies=3)], clusters=[cluster(10)])
    assert held(out) == {"ns/dup": ("capacity", "queue q: cpu 6/5")}


# --- capacity ------------------------------------------------------------------------------------------------


def test_hierarchical_capability_caps_the_whole_subtree() -> None:
    queues = [Queue(name="org", capability={"cpu": 4 * CPU}), Queue(name="team-a", parent="org", creation_ms=1),
              Queue(name="team-b", parent="org", creation_ms=2, capability={"cpu": 10 * CPU})]
    bindings = [rb("a-running", "team-a", cpu=2, suspended=False), rb("a1", "team-a", cpu=1, created=1),
                rb("b1", "team-b", cpu=2, created=2), rb("b2", "team-b", cpu=1, created=3)]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(100)], config=config(["capacity"]))
    # org: 2 running + a1 = 3 of 4; b1 would make 5 (team-b's own 10 is not the limit); b2 still fits, after b1
    assert out.resume == ("ns/a1", "ns/b2")
    assert held(out) == {"ns/b1": ("capacity", "queue org (ancestor of team-b): cpu 5/4")}


def test_hierarchy_admits_up_to_the_parent() -> None:
    queues = [Queue(name="org", capability={"cpu": 4 * CPU}), Queue(name="team-a", parent="org", creation_ms=1),
              Queue(name="team-b", parent="org", creation_ms=2)]
    bindings = [rb("a1", "team-a", cpu=2), rb("b1", "team-b", cpu=1, created=1), rb("a2", "team-a", cpu=1, created=2),
                rb("b2", "team-b", cpu=1, created=3)]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(100)], config=config(["capacity"]))
    assert out.resume == ("ns/a1", "ns/b1", "ns/a2")
    assert held(out) == {"ns/b2": ("capacity", "queue org (ancestor of team-b): cpu 5/4")}


def test_root_parent_is_top_level_and_a_missing_parent_or_cycle_holds() -> None:
    queues = [Queue(name="top", parent="root"), Queue(name="orphan", parent="gone"),
              Queue(name="x", parent="y"), Queue(name="y", parent="x"), Queue(name="child", parent="orphan")]
    bindings = [rb("t", "top"), rb("o", "orphan"), rb("x", "x"), rb("c", "child")]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(100)])
    assert out.resume == ("ns/t",)
    assert held(out) == {
        "ns/c": ("queue", "queue orphan: parent queue gone not found"),
        "ns/o": ("queue", "queue orphan: parent queue gone not found"),
        "ns/x": ("queue", "queue x: parent cycle x -> y -> x"),
    }


def test_cluster_headroom_is_allocatable_minus_allocated_of_ready_clusters() -> None:
    clusters = [cluster(8, allocated=5, name="m1"), cluster(100, ready=False, name="m2"), cluster(2, name="m3")]
    bindings = [rb("three", cpu=3), rb("two", cpu=2, created=1), rb("one", cpu=1, created=2)]
    out = admission_cycle(queues=[Queue(name="q")], bindings=bindings, clusters=clusters, config=config(["capacity"]))
    assert out.resume == ("ns/three", "ns/two")  # 3 + 2 of 5 free
    assert held(out) == {"ns/one": ("capacity", "clusters: cpu 1/0 free")}
    ignoring = parse_admission_config("tiers:\n- plugins:\n  - name: capacity\n    arguments: {clusters: false}\n")
    assert len(admission_cycle(queues=[Queue(name="q")], bindings=bindings, clusters=clusters,
                               config=ignoring).resume) == 3


def test_no_ready_cluster_holds_everything() -> None:
    out = admission_cycle(queues=[Queue(name="q")], bindings=[rb("a")], clusters=[cluster(8, ready=False)])
    assert held(out) == {"ns/a": ("capacity", "no ready cluster")}


def test_a_resource_no_cluster_has_cannot_be_admitted() -> None:
    gpu = Binding(key="ns/gpu", queue="q", request={"nvidia.com/gpu": 1000})
    out = admission_cycle(queues=[Queue(name="q")], bindings=[gpu], clusters=[cluster(8)])
    assert held(out) == {"ns/gpu": ("capacity", "clusters: nvidia.com/gpu 1/0 free")}


# --- proportion ----------------------------------------------------------------------------------------------


def test_deserved_is_weighted_water_filling_capped_by_request_and_capability() -> None:
    queues = [Queue(name="a", weight=1), Queue(name="b", weight=1, capability={"cpu": 2 * CPU}),
              Queue(name="c", weight=2), Queue(name="idle", weight=5)]
    bindings = [rb(f"{q}{i}", q, created=i) for q in "abc" for i in range(12)]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(12)],
                          config=config(["proportion"]))
    # b is capped at 2, idle asks for nothing; the other 10 are shared 1:2, in milli-units (floored)
    assert {q.name: q.deserved["cpu"] for q in out.queues} == {"a": 3333, "b": 2000, "c": 6666, "idle": 0}
    assert {q.name: q.resumed for q in out.queues} == {"a": 3, "b": 2, "c": 6, "idle": 0}


def test_guarantee_and_explicit_deserved() -> None:
    queues = [Queue(name="a", guarantee={"cpu": 6 * CPU}), Queue(name="b"), Queue(name="c", deserved={"cpu": 1 * CPU})]
    bindings = [rb(f"{q}{i}", q, created=i) for q in "abc" for i in range(10)]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(10)], config=config(["proportion"]))
    # a keeps its 6 and shares the 3 left (after c's fixed 1) with b by weight
    assert {q.name: q.deserved["cpu"] for q in out.queues} == {"a": 7500, "b": 1500, "c": 1000}
    assert {q.name: q.resumed for q in out.queues} == {"a": 7, "b": 1, "c": 1}


def test_over_its_share_waits_while_others_want_it() -> None:
    queues = [Queue(name="a", creation_ms=1), Queue(name="b", creation_ms=2)]
    bindings = [rb("a-running", "a", cpu=4, suspended=False), rb("a1", "a"), rb("b1", "b"), rb("b2", "b", created=1)]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(6, allocated=4)],
                          config=config(["proportion", "capacity"]))
    assert out.resume == ("ns/b1", "ns/b2")  # b deserves the 2 it asks for, a the other 4 and has them
    assert held(out) == {"ns/a1": ("proportion", "queue a: cpu 5/4 over its fair share")}


def test_a_queue_may_take_what_no_one_else_wants() -> None:
    queues = [Queue(name="a"), Queue(name="b")]
    bindings = [rb(f"a{i}", "a", created=i) for i in range(6)] + [rb("b0", "b")]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(6)], config=config(["proportion"]))
    assert len(out.resume) == 6 and "ns/b0" in out.resume  # a deserves 5 (b asks for 1 only), b its 1
    assert {q.name: q.deserved["cpu"] for q in out.queues} == {"a": 5 * CPU, "b": 1 * CPU}


def test_proportion_orders_queues_by_share() -> None:
    queues = [Queue(name="busy", creation_ms=1), Queue(name="quiet", creation_ms=2)]
    bindings = [rb("busy-running", "busy", cpu=2, suspended=False), rb("busy1", "busy"), rb("quiet1", "quiet")]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(100)], config=config(["proportion"]))
    assert out.resume == ("ns/quiet1", "ns/busy1")


def test_backfill_breaks_the_big_gang_deadlock_and_waits_for_a_starved_share() -> None:
    queues = [Queue(name="a", creation_ms=1), Queue(name="b", creation_ms=2)]
    bindings = [rb("a-big", "a", cpu=8), rb("b-big", "b", cpu=6)]  # each deserves 5 of 10: neither within share
    fair = config(["proportion", "capacity"])
    assert admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(10)], config=fair).resume == ()
    backfilled = config(["proportion", "capacity"], actions="enqueue, allocate, backfill")
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(10)], config=backfilled)
    assert out.resume == ("ns/a-big",)
    assert held(out) == {"ns/b-big": ("capacity", "clusters: cpu 6/2 free")}
    # b's next binding is within its share but the clusters are short: no backfill may take that room
    waiting = [rb("a-big", "a", cpu=8), rb("b-small", "b", cpu=3)]
    out = admission_cycle(queues=queues, bindings=waiting, clusters=[cluster(10, allocated=8)], config=backfilled)
    assert out.resume == ()
    assert held(out)["ns/a-big"][0] == "proportion"


# --- drf -----------------------------------------------------------------------------------------------------


def test_drf_orders_queues_by_dominant_share() -> None:
    queues = [Queue(name="cpu-heavy", creation_ms=1), Queue(name="mem-heavy", creation_ms=2)]
    total = ClusterCapacity(name="m", allocatable={"cpu": 10 * CPU, "memory": 100 * CPU})
    bindings = [
        Binding(key="ns/c-run", queue="cpu-heavy", request={"cpu": 3 * CPU, "memory": 1 * CPU}, suspended=False),
        Binding(key="ns/m-run", queue="mem-heavy", request={"cpu": 1 * CPU, "memory": 50 * CPU}, suspended=False),
        Binding(key="ns/c1", queue="cpu-heavy", request={"cpu": 1}), Binding(key="ns/m1", queue="mem-heavy",
                                                                             request={"cpu": 1}),
    ]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[total], config=config(["drf"]))
    assert out.resume == ("ns/c1", "ns/m1")  # cpu-heavy: 30% dominant; mem-heavy: 50%


# --- datadependency ------------------------------------------------------------------------------------------


def test_data_dependent_binding_waits_for_its_placement() -> None:
    bindings = [rb("waiting", data_dependent=True), rb("placed", data_dependent=True, placement_injected=True,
                                                        created=1), rb("plain", created=2)]
    out = admission_cycle(queues=[Queue(name="q")], bindings=bindings, clusters=[cluster(10)])
    assert out.resume == ("ns/placed", "ns/plain")
    assert held(out) == {"ns/waiting": ("datadependency", "waiting for data placement")}
    assert out.queues[0].pending == 1
    without = admission_cycle(queues=[Queue(name="q")], bindings=bindings, clusters=[cluster(10)],
                              config=config(["priority", "capacity"]))
    assert "ns/waiting" in without.resume


def test_a_held_data_binding_does_not_inflate_its_queues_share() -> None:
    queues = [Queue(name="a"), Queue(name="b")]
    bindings = [rb("a-data", "a", cpu=5, data_dependent=True), rb("b1", "b", cpu=3), rb("b2", "b", cpu=3, created=1)]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=[cluster(6)])
    assert out.resume == ("ns/b1", "ns/b2")
    assert {q.name: q.deserved["cpu"] for q in out.queues} == {"a": 0, "b": 6 * CPU}


# --- queues --------------------------------------------------------------------------------------------------


def test_missing_queues_closed_queues_and_the_default_queue() -> None:
    bindings = [rb("d", "default"), rb("m", "missing"), rb("c", "closed")]
    out = admission_cycle(queues=[Queue(name="closed", open=False)], bindings=bindings, clusters=[cluster(10)])
    assert out.resume == ("ns/d",)
    assert held(out) == {"ns/c": ("queue", "queue closed is not open"), "ns/m": ("queue", "queue missing not found")}
    assert [q.name for q in out.queues] == ["closed", "default"]


def test_tier_precedence_first_distinguishing_tier_decides() -> None:
    queues = [Queue(name="light", creation_ms=1), Queue(name="vip", creation_ms=2, priority=9)]
    bindings = [rb("vip-running", "vip", cpu=5, suspended=False), rb("vip1", "vip"), rb("light1", "light")]
    clusters = [cluster(10)]
    by_priority = admission_cycle(queues=queues, bindings=bindings, clusters=clusters,
                                  config=config(["priority"], ["drf"]))
    by_share = admission_cycle(queues=queues, bindings=bindings, clusters=clusters,
                               config=config(["drf"], ["priority"]))
    assert by_priority.resume == ("ns/vip1", "ns/light1")
    assert by_share.resume == ("ns/light1", "ns/vip1")
    switched_off = parse_admission_config(
        "tiers:\n- plugins:\n  - name: priority\n    enableQueueOrder: false\n  - name: drf\n")
    assert admission_cycle(queues=queues, bindings=bindings, clusters=clusters,
                           config=switched_off).resume == ("ns/light1", "ns/vip1")


def test_a_predicate_in_any_tier_holds_and_the_first_reason_is_given() -> None:
    queue = Queue(name="q", capability={"cpu": 1 * CPU})
    binding = rb("big", cpu=2)
    late = admission_cycle(queues=[queue], bindings=[binding], clusters=[cluster(1)],
                           config=config(["priority"], ["drf"], ["capacity"]))
    assert held(late) == {"ns/big": ("capacity", "queue q: cpu 2/1")}
    first = admission_cycle(queues=[queue], bindings=[binding], clusters=[cluster(1)],
                            config=config(["proportion"], ["capacity"]))
    assert held(first)["ns/big"][0] == "proportion"
    off = parse_admission_config("tiers:\n- plugins:\n  - name: capacity\n    enablePredicate: false\n")
    assert admission_cycle(queues=[queue], bindings=[binding], clusters=[cluster(1)], config=off).resume == ("ns/big",)
