"""Over many cycles: fair share converges to the weights, nothing that fits starves, limits always hold; and one
cycle is a deterministic function of its input (byte for byte, whatever the input order)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.admission.model import Binding, ClusterCapacity
from tether.core.admission.session import admission_cycle
from tether.core.quantity import fits
from tether.core.world.admission_state import DEFAULT_ADMISSION_CONFIG, Queue

CPU = 1000


class Simulation:
    """Bindings arrive at a cycle, are admitted by admission_cycle, run for ``duration`` cycles and finish."""

    def __init__(self, queues: Sequence[Queue], arrivals: Sequence[tuple[int, Binding, int]], cluster_cpu: int) -> None:
        self.queues = list(queues)
        self.arrivals = list(arrivals)  # (arrival cycle, binding, duration)
        self.cluster_cpu = cluster_cpu
        self.admitted_at: dict[str, int] = {}
        self.running_by_cycle: list[dict[str, int]] = []  # queue → cpu running after each cycle's admissions

    def step(self, cycle: int) -> None:
        present: list[Binding] = []
        running: list[Binding] = []
        for arrival, binding, duration in self.arrivals:
            start = self.admitted_at.get(binding.key)
            if start is None and arrival <= cycle:
                present.append(binding)
            elif start is not None and cycle < start + duration:
                running.append(binding)
                present.append(msgspec.structs.replace(binding, suspended=False))
        allocated = sum(b.total_request().get("cpu", 0) for b in running)
        clusters = [ClusterCapacity(name="member1", allocatable={"cpu": self.cluster_cpu * CPU},
                                    allocated={"cpu": allocated})]
        out = admission_cycle(queues=self.queues, bindings=present, clusters=clusters)
        for key in out.resume:
            self.admitted_at[key] = cycle
        self.running_by_cycle.append({q.name: q.allocated.get("cpu", 0) // CPU for q in out.queues})

    def run(self, cycles: int) -> None:
        for cycle in range(cycles):
            self.step(cycle)


def test_fair_share_converges_to_the_weights() -> None:
    queues = [Queue(name="a", weight=1, creation_ms=1), Queue(name="b", weight=2, creation_ms=2),
              Queue(name="c", weight=3, creation_ms=3)]
    arrivals = [(0 if q != "c" else 10, Binding(key=f"{q}/job-{i:03d}", queue=q, creation_ms=i, uid=f"{q}{i}",
                                                request={"cpu": CPU}), 3)
                for q in "abc" for i in range(300)]
    sim = Simulation(queues, arrivals, cluster_cpu=12)
    sim.run(60)
    assert sim.running_by_cycle[5] == {"a": 4, "b": 8, "c": 0}  # before c arrives: a and b share 1:2
    for cycle in range(20, 60):  # c arrived at 10; once the earlier admissions finished: 2:4:6
        assert sim.running_by_cycle[cycle] == {"a": 2, "b": 4, "c": 6}, cycle
    admissions = {q: sum(1 for k, t in sim.admitted_at.items() if k.startswith(q) and 21 <= t < 60) for q in "abc"}
    assert admissions["b"] == 2 * admissions["a"] and admissions["c"] == 3 * admissions["a"] > 0


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Queue], list[tuple[int, Binding, int]], int]:
    cluster_cpu = draw(st.integers(4, 16))
    count = draw(st.integers(1, 4))
    queues = [Queue(name=f"q{i}", weight=draw(st.integers(1, 4)), priority=draw(st.integers(0, 2)), creation_ms=i,
                    capability={"cpu": draw(st.integers(2, 20)) * CPU} if draw(st.booleans()) else {})
              for i in range(count)]
    arrivals = []
    for i in range(draw(st.integers(1, 20))):
        binding = Binding(key=f"ns/b{i:02d}", queue=f"q{draw(st.integers(0, count - 1))}", uid=f"u{i}",
                          creation_ms=draw(st.integers(0, 5)), priority=draw(st.sampled_from((0, 10, 100))),
                          request={"cpu": draw(st.integers(1, 6)) * CPU}, replicas=draw(st.integers(1, 3)))
        arrivals.append((draw(st.integers(0, 5)), binding, draw(st.integers(1, 4))))
    return queues, arrivals, cluster_cpu


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_every_binding_that_fits_is_admitted_eventually_and_limits_hold(
        world: tuple[list[Queue], list[tuple[int, Binding, int]], int]) -> None:
    queues, arrivals, cluster_cpu = world
    capability = {q.name: q.capability for q in queues}
    sim = Simulation(queues, arrivals, cluster_cpu)
    sim.run(150)
    for _, binding, _ in arrivals:
        total = binding.total_request()
        if fits(total, capability[binding.queue]) and total["cpu"] <= cluster_cpu * CPU:
            assert binding.key in sim.admitted_at, binding
        else:
            assert binding.key not in sim.admitted_at, binding
    for running in sim.running_by_cycle:
        assert sum(running.values()) <= cluster_cpu
        for name, cpu in running.items():
            assert fits({"cpu": cpu * CPU}, capability[name])


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Queue], list[Binding], list[ClusterCapacity]]:
    names = [f"q{i}" for i in range(draw(st.integers(1, 5)))]
    queues = [Queue(name=n, parent=draw(st.sampled_from(["", *names[:i]])), weight=draw(st.integers(1, 3)),
                    priority=draw(st.integers(0, 1)), creation_ms=draw(st.integers(0, 2)),
                    capability={"cpu": draw(st.integers(1, 30)) * CPU} if draw(st.booleans()) else {},
                    guarantee={"cpu": CPU} if draw(st.booleans()) else {})
              for i, n in enumerate(names)]
    bindings = [Binding(key=f"ns/b{i}", queue=draw(st.sampled_from([*names, "default", "nowhere"])),
                        priority=draw(st.sampled_from((0, 5))), creation_ms=draw(st.integers(0, 3)),
                        uid=draw(st.sampled_from(("x", "y"))),
                        request={"cpu": draw(st.integers(0, 4)) * 500, "memory": draw(st.integers(1, 3)) * CPU},
                        replicas=draw(st.integers(0, 3)), suspended=draw(st.booleans()),
                        data_dependent=draw(st.booleans()), placement_injected=draw(st.booleans()))
                for i in range(draw(st.integers(0, 30)))]
    clusters = [ClusterCapacity(name=f"m{i}", allocatable={"cpu": draw(st.integers(0, 20)) * CPU, "memory": 50 * CPU},
                                allocated={"cpu": draw(st.integers(0, 5)) * CPU}, ready=draw(st.booleans()))
                for i in range(draw(st.integers(0, 3)))]
    return queues, bindings, clusters


@settings(max_examples=150, deadline=None)
@given(worlds(), st.randoms(use_true_random=False))
def test_one_cycle_is_deterministic_and_accounts_for_every_suspended_binding(
        world: tuple[list[Queue], list[Binding], list[ClusterCapacity]], shuffler: random.Random) -> None:
    queues, bindings, clusters = world
    first = admission_cycle(queues=queues, bindings=bindings, clusters=clusters)
    for items in (queues, bindings, clusters):
        shuffler.shuffle(items)
    again = admission_cycle(queues=queues, bindings=bindings, clusters=clusters, config=DEFAULT_ADMISSION_CONFIG)
    assert msgspec.json.encode(first) == msgspec.json.encode(again)
    suspended = {b.key for b in bindings if b.suspended}
    held = {h.binding for h in first.held}
    assert len(first.resume) == len(set(first.resume))
    assert set(first.resume) | held == suspended and not set(first.resume) & held
    assert sum(q.pending for q in first.queues) == len({b.key for b in bindings if b.suspended and b.key in held
                                                        and b.queue in {q.name for q in first.queues}})
