"""Preemption and reclaim in one admission cycle (``core.admission.preemption``): whom a waiting binding may evict,
how few, and never for nothing; the policy as the admission ConfigMap says it (``core.admission.config``)."""

from __future__ import annotations

import random

import msgspec
import pytest

from tether.core.admission.config import DEFAULT_ADMISSION_CONFIG_YAML, AdmissionConfigError, parse_admission_config
from tether.core.admission.model import AdmissionOutcome, Binding, ClusterCapacity
from tether.core.admission.session import admission_cycle
from tether.core.world.admission_state import AdmissionConfig, Queue, QueuePolicy

TIERS = """\
tiers:
- plugins: [{name: priority}, {name: gang}, {name: datadependency}]
- plugins: [{name: drf}, {name: capacity}, {name: proportion}]
"""
CLUSTERS = [ClusterCapacity(name="member1", allocatable={"cpu": 64_000})]


def config(policies: str, *, actions: str = "enqueue, allocate, preempt, reclaim, backfill") -> AdmissionConfig:
    return parse_admission_config(f'actions: "{actions}"\n{TIERS}configurations:\n- name: preempt\n  arguments:\n'
                                  f'    queues:\n' + "".join(f"      {line}\n" for line in policies.splitlines()))


def running(name: str, queue: str, cpu: int, *, priority: int = 0, admitted: int = 1, scheduled: bool = True,
            **extra: object) -> Binding:
    return Binding(key=f"ResourceBinding/ns/{name}", queue=queue, priority=priority, request={"cpu": cpu},
                   suspended=False, admitted_ms=admitted, creation_ms=admitted, uid=name, scheduled=scheduled,
                   **extra)  # type: ignore[arg-type]


def waiting(name: str, queue: str, cpu: int, *, priority: int = 0, created: int = 100, **extra: object) -> Binding:
    return Binding(key=f"ResourceBinding/ns/{name}", queue=queue, priority=priority, request={"cpu": cpu},
                   creation_ms=created, uid=name, **extra)  # type: ignore[arg-type]


def evicted(outcome: AdmissionOutcome) -> list[tuple[str, str, str]]:
    return [(e.binding.rsplit("/", 1)[1], e.for_binding.rsplit("/", 1)[1], e.policy) for e in outcome.evicted]


def resumed(outcome: AdmissionOutcome) -> list[str]:
    return [key.rsplit("/", 1)[1] for key in outcome.resume]


WITHIN = config("q1: {withinQueue: LowerPriority}")
ONE_CPU = [Queue(name="q1", capability={"cpu": 1000})]


def test_a_high_priority_arrival_evicts_exactly_one_low_binding_the_most_recently_admitted() -> None:
    bindings = [running("low-1", "q1", 400, admitted=1), running("low-2", "q1", 400, admitted=2),
                waiting("high", "q1", 600, priority=100)]
    outcome = admission_cycle(queues=ONE_CPU, bindings=bindings, clusters=CLUSTERS, config=WITHIN)
    assert evicted(outcome) == [("low-2", "high", "preempt")]
    assert resumed(outcome) == ["high"]
    [hold] = outcome.held
    assert hold.binding.endswith("low-2") and hold.reason == (
        "queue q1: evicted for ns/high (priority 100 > 0; withinQueue: LowerPriority); waiting until it is admitted")
    [queue] = outcome.queues
    assert queue.allocated == {"cpu": 1000} and queue.admitted == 2 and queue.pending == 1
    assert queue.pending_request == {"cpu": 400}


@pytest.mark.parametrize("chosen", [
    AdmissionConfig(actions=("enqueue",), tiers=WITHIN.tiers),  # no policy at all: today's admission
    config("q1: {withinQueue: Never, reclaim: Never}"),
    config("q1: {withinQueue: LowerPriority}", actions="enqueue, allocate, backfill"),  # its action not listed
    config("other: {withinQueue: LowerPriority}"),  # another queue's policy
])
def test_nothing_is_evicted_without_a_policy_and_its_action(chosen: AdmissionConfig) -> None:
    bindings = [running("low-1", "q1", 400), running("low-2", "q1", 400), waiting("high", "q1", 600, priority=100)]
    outcome = admission_cycle(queues=ONE_CPU, bindings=bindings, clusters=CLUSTERS, config=chosen)
    assert outcome.evicted == () and outcome.resume == ()
    assert [h.reason for h in outcome.held] == ["queue q1: cpu 1400m/1"]


def test_the_default_configuration_decides_byte_for_byte_as_before() -> None:
    """No policy: the preemption pass does not even run — the same outcome, to the byte, with or without it."""
    rng = random.Random(7)
    queues = [Queue(name=f"q{i}", capability={"cpu": rng.choice((2000, 4000))}, creation_ms=i) for i in range(4)]
    bindings = [Binding(key=f"ResourceBinding/ns/b{i}", queue=f"q{i % 4}", priority=rng.choice((0, 10, 100)),
                        request={"cpu": rng.choice((300, 700, 1500))}, suspended=rng.random() < 0.7, creation_ms=i,
                        uid=f"u{i}") for i in range(60)]
    default = parse_admission_config(DEFAULT_ADMISSION_CONFIG_YAML)
    with_action = msgspec.structs.replace(default, actions=(*default.actions, "preempt", "reclaim"))
    plain = admission_cycle(queues=queues, bindings=bindings, clusters=CLUSTERS, config=default)
    assert plain.held and plain.resume  # (both kinds of decision happen)
    assert msgspec.json.encode(admission_cycle(queues=queues, bindings=bindings, clusters=CLUSTERS,
                                               config=with_action)) == msgspec.json.encode(plain)


def test_nothing_is_evicted_for_a_binding_that_would_still_not_fit() -> None:
    bindings = [running("low-1", "q1", 400), running("low-2", "q1", 400), waiting("huge", "q1", 1200, priority=100)]
    outcome = admission_cycle(queues=ONE_CPU, bindings=bindings, clusters=CLUSTERS, config=WITHIN)
    assert outcome.evicted == () and outcome.resume == ()


def test_only_a_lower_priority_is_evicted_within_a_queue() -> None:
    bindings = [running("peer-1", "q1", 400, priority=100), running("peer-2", "q1", 400, priority=100),
                waiting("high", "q1", 600, priority=100)]
    assert admission_cycle(queues=ONE_CPU, bindings=bindings, clusters=CLUSTERS, config=WITHIN).evicted == ()


def test_the_fewest_lowest_priority_first_then_the_most_recently_admitted() -> None:
    """In eviction order: small (p0, admitted last), big (p0), mid (p5). small alone frees too little; small and big
    make room; small is then given back, as big alone is enough. mid (a higher priority) is never reached."""
    bindings = [running("big", "q1", 500, admitted=1), running("small", "q1", 100, admitted=2),
                running("mid", "q1", 300, priority=5, admitted=3), waiting("high", "q1", 500, priority=100)]
    outcome = admission_cycle(queues=ONE_CPU, bindings=bindings, clusters=CLUSTERS, config=WITHIN)
    assert evicted(outcome) == [("big", "high", "preempt")]
    # two of the lowest priority each too small alone: both go, and the higher priority stays
    bindings = [running("a", "q1", 300, admitted=1), running("b", "q1", 300, admitted=2),
                running("mid", "q1", 300, priority=5, admitted=3), waiting("high", "q1", 600, priority=100)]
    outcome = admission_cycle(queues=ONE_CPU, bindings=bindings, clusters=CLUSTERS, config=WITHIN)
    assert sorted(evicted(outcome)) == [("a", "high", "preempt"), ("b", "high", "preempt")]


def test_of_two_admitted_together_the_one_admitted_last_is_evicted() -> None:
    """Admitted by one cycle, created in the same second: the round robin admitted them in binding order, so the
    last in binding order is the most recently admitted."""
    bindings = [running("b", "q1", 400, admitted=5), running("a", "q1", 400, admitted=5),
                waiting("high", "q1", 600, priority=100)]
    assert evicted(admission_cycle(queues=ONE_CPU, bindings=bindings, clusters=CLUSTERS, config=WITHIN)) == \
        [("b", "high", "preempt")]


def test_a_binding_admitted_by_this_cycle_or_whose_resume_is_on_its_way_is_not_evicted() -> None:
    bindings = [running("low-1", "q1", 400, evictable=False), running("low-2", "q1", 400, evictable=False),
                waiting("high", "q1", 600, priority=100)]
    assert admission_cycle(queues=ONE_CPU, bindings=bindings, clusters=CLUSTERS, config=WITHIN).evicted == ()


def test_an_evicted_binding_waits_for_the_one_it_made_room_for() -> None:
    """The room is free (the queue is empty), yet the evicted binding is held while the binding it was evicted for
    waits; once that one is no longer waiting (admitted, or gone), it is admitted."""
    victim = waiting("low", "q1", 400, evicted_for="ResourceBinding/ns/high", created=1)
    high = waiting("high", "q1", 1200, priority=100, created=2)  # too big to be admitted: it keeps waiting
    outcome = admission_cycle(queues=ONE_CPU, bindings=[victim, high], clusters=CLUSTERS, config=WITHIN)
    assert outcome.resume == ()
    assert {h.binding.rsplit("/", 1)[1]: h.reason for h in outcome.held}["low"] == \
        "evicted for ns/high: waiting until it is admitted"
    outcome = admission_cycle(queues=ONE_CPU, bindings=[victim, msgspec.structs.replace(high, suspended=False,
                                                                                        request={"cpu": 600})],
                              clusters=CLUSTERS, config=WITHIN)
    assert resumed(outcome) == ["low"]
    assert resumed(admission_cycle(queues=ONE_CPU, bindings=[victim], clusters=CLUSTERS, config=WITHIN)) == ["low"]


def test_an_evicted_binding_is_not_evicted_again_for_the_same_arrival() -> None:
    """Cycle after cycle: the arrival evicts once, is admitted; the evicted binding is never admitted while it
    waits, and nothing is evicted twice."""
    queue = ONE_CPU
    bindings = {b.key: b for b in [running("low-1", "q1", 400, admitted=1), running("low-2", "q1", 400, admitted=2),
                                   waiting("high", "q1", 600, priority=100)]}
    evictions: list[tuple[str, str, str]] = []
    for cycle in range(5):
        outcome = admission_cycle(queues=queue, bindings=list(bindings.values()), clusters=CLUSTERS, config=WITHIN)
        evictions += evicted(outcome)
        for eviction in outcome.evicted:
            bindings[eviction.binding] = msgspec.structs.replace(bindings[eviction.binding], suspended=True,
                                                                 evicted_for=eviction.for_binding)
        for key in outcome.resume:
            bindings[key] = msgspec.structs.replace(bindings[key], suspended=False, admitted_ms=10 + cycle)
    assert evictions == [("low-2", "high", "preempt")]
    assert bindings["ResourceBinding/ns/low-2"].suspended and not bindings["ResourceBinding/ns/high"].suspended


def test_an_eviction_frees_the_clusters_room_only_of_a_binding_karmada_placed() -> None:
    """No capability: the clusters are the limit. Evicting a placed binding frees its room there; one not placed
    yet holds none in the clusters' summary, so evicting it would not make room."""
    queues = [Queue(name="q1")]
    full = [ClusterCapacity(name="member1", allocatable={"cpu": 1000}, allocated={"cpu": 800})]
    placed = [running("low", "q1", 800), waiting("high", "q1", 600, priority=100)]
    assert evicted(admission_cycle(queues=queues, bindings=placed, clusters=full, config=WITHIN)) == \
        [("low", "high", "preempt")]
    not_placed = [running("low", "q1", 800, scheduled=False), waiting("high", "q1", 600, priority=100)]
    assert admission_cycle(queues=queues, bindings=not_placed, clusters=full, config=WITHIN).evicted == ()


# --- reclaim ------------------------------------------------------------------------------------------------

RECLAIM_QUEUES = [Queue(name="org", capability={"cpu": 1000}, creation_ms=0),
                  Queue(name="qa", parent="org", deserved={"cpu": 400}, creation_ms=1),
                  Queue(name="qb", parent="org", deserved={"cpu": 600}, creation_ms=2)]


def test_reclaim_takes_back_what_another_queue_borrowed_not_what_it_deserves() -> None:
    """qa deserves 400m and runs 800m (it borrowed qb's idle share): qb's own binding takes back qa's borrowed
    binding — its most recently admitted — and never the one within qa's share."""
    bindings = [running("a-deserved", "qa", 400, admitted=1), running("a-borrowed", "qa", 400, admitted=2),
                waiting("b", "qb", 400)]
    outcome = admission_cycle(queues=RECLAIM_QUEUES, bindings=bindings, clusters=CLUSTERS,
                              config=config("qb: {reclaim: Any}"))
    assert evicted(outcome) == [("a-borrowed", "b", "reclaim")] and resumed(outcome) == ["b"]
    assert outcome.evicted[0].reason == (
        "queue qa: evicted for ns/b of queue qb (reclaim: Any; priority 0, its own 0; queue qa used cpu 800m of its "
        "deserved 400m); waiting until it is admitted")
    # the same without a reclaim policy, or from a queue that is not reclaimable: nothing
    for chosen, queues in ((config("qb: {withinQueue: LowerPriority}"), RECLAIM_QUEUES),
                           (config("qb: {reclaim: Any}"), [
                               RECLAIM_QUEUES[0], msgspec.structs.replace(RECLAIM_QUEUES[1], reclaimable=False),
                               RECLAIM_QUEUES[2]])):
        assert admission_cycle(queues=queues, bindings=bindings, clusters=CLUSTERS, config=chosen).evicted == ()


def test_reclaim_lower_priority_takes_only_a_lower_priority_and_any_takes_any() -> None:
    bindings = [running("a-deserved", "qa", 400, priority=50, admitted=1),
                running("a-borrowed", "qa", 400, priority=50, admitted=2), waiting("b", "qb", 400, priority=10)]
    lower = config("qb: {reclaim: LowerPriority}")
    assert admission_cycle(queues=RECLAIM_QUEUES, bindings=bindings, clusters=CLUSTERS, config=lower).evicted == ()
    assert evicted(admission_cycle(queues=RECLAIM_QUEUES, bindings=bindings, clusters=CLUSTERS,
                                   config=config("qb: {reclaim: Any}"))) == [("a-borrowed", "b", "reclaim")]


def test_a_queue_reclaims_only_within_its_own_deserved_share() -> None:
    """qb deserves 600m: an arrival of 700m would put it over its own share, so it takes nothing back."""
    bindings = [running("a-deserved", "qa", 400, admitted=1), running("a-borrowed", "qa", 400, admitted=2),
                waiting("b", "qb", 700)]
    assert admission_cycle(queues=RECLAIM_QUEUES, bindings=bindings, clusters=CLUSTERS,
                           config=config("qb: {reclaim: Any}")).evicted == ()


def test_one_cycle_with_evictions_is_a_function_of_its_input_whatever_its_order() -> None:
    rng = random.Random(11)
    queues = [Queue(name="org", capability={"cpu": 6000}, creation_ms=0)] + [
        Queue(name=f"q{i}", parent="org", weight=i + 1, capability={"cpu": 3000}, creation_ms=i + 1)
        for i in range(3)]
    bindings = [Binding(key=f"ResourceBinding/ns/b{i:02d}", queue=f"q{i % 3}",
                        priority=rng.choice((0, 10) if i < 12 else (10, 100)),
                        request={"cpu": rng.choice((300, 700, 1000))}, suspended=i >= 12, creation_ms=i, uid=f"u{i}",
                        admitted_ms=i if i < 12 else 0, scheduled=i < 12) for i in range(40)]
    chosen = config("q0: {withinQueue: LowerPriority, reclaim: Any}\nq1: {reclaim: LowerPriority}\n"
                    "q2: {withinQueue: LowerPriority}")
    first = admission_cycle(queues=queues, bindings=bindings, clusters=CLUSTERS, config=chosen)
    assert first.evicted
    for _ in range(5):
        rng.shuffle(bindings)
        rng.shuffle(queues)
        again = admission_cycle(queues=queues, bindings=bindings, clusters=CLUSTERS, config=chosen)
        assert msgspec.json.encode(again) == msgspec.json.encode(first)


# --- several pod templates ----------------------------------------------------------------------------------


def test_a_binding_of_several_pod_templates_is_charged_their_sum() -> None:
    """Three components (1 x 1 CPU driver, 4 x 500m executors, 2 x 250m sidecars): 3500m per copy, twice for a
    Duplicated placement on two clusters — what capability, deserved share and DRF see."""
    whole = {"cpu": 1000 + 4 * 500 + 2 * 250}
    job = Binding(key="ResourceBinding/ns/spark", queue="q1", request={"cpu": 1750}, whole=whole, copies=2,
                  creation_ms=1, uid="spark")
    assert job.total_request() == {"cpu": 7000}
    outcome = admission_cycle(queues=[Queue(name="q1", capability={"cpu": 7000})], bindings=[job], clusters=CLUSTERS)
    assert resumed(outcome) == ["spark"] and outcome.queues[0].allocated == {"cpu": 7000}
    outcome = admission_cycle(queues=[Queue(name="q1", capability={"cpu": 6999})], bindings=[job], clusters=CLUSTERS)
    assert [h.reason for h in outcome.held] == ["queue q1: cpu 7/6999m"]


# --- the policy in the admission ConfigMap ------------------------------------------------------------------


def test_the_policies_parse_per_queue_in_kueues_terms() -> None:
    chosen = config("training: {withinQueue: LowerPriority, reclaim: Any}\nanalytics: {reclaim: LowerPriority}")
    assert chosen.policies == {"analytics": QueuePolicy(reclaim="LowerPriority"),
                               "training": QueuePolicy(within_queue="LowerPriority", reclaim="Any")}
    assert chosen.policy("training") == QueuePolicy(within_queue="LowerPriority", reclaim="Any")
    assert chosen.policy("nobody") == QueuePolicy()
    only_preempt = config("training: {withinQueue: LowerPriority, reclaim: Any}", actions="enqueue, preempt")
    assert only_preempt.policy("training") == QueuePolicy(within_queue="LowerPriority")
    # Volcano's other action configurations (and preempt's own node-level arguments) are passed over
    assert parse_admission_config(f'actions: "enqueue"\n{TIERS}configurations:\n- name: enqueue\n  arguments: '
                                  f'{{overcommit-factor: 1.2}}\n').policies == {}


@pytest.mark.parametrize(("policies", "message"), [
    ("q1: {withinQueue: Any}", "queue 'q1': withinQueue: unknown policy 'Any' (known: Never, LowerPriority)"),
    ("q1: {reclaim: Sometimes}", "queue 'q1': reclaim: unknown policy 'Sometimes' (known: Never, LowerPriority, "
                                 "Any)"),
    ("q1: {withinClusterQueue: LowerPriority}", "queue 'q1': unknown field 'withinClusterQueue' (known: "
                                                "withinQueue, reclaim)"),
    ("q1: LowerPriority", "queue 'q1': expected {withinQueue, reclaim}, got 'LowerPriority'"),
])
def test_an_unknown_policy_is_refused_naming_the_queue(policies: str, message: str) -> None:
    with pytest.raises(AdmissionConfigError) as error:
        config(policies)
    assert str(error.value) == f"admission config: configurations: preempt: {message}"


def test_preempt_configured_twice_is_refused() -> None:
    with pytest.raises(AdmissionConfigError, match="'preempt' configured twice"):
        parse_admission_config(f'actions: "enqueue, preempt"\n{TIERS}configurations:\n- name: preempt\n'
                               f'- name: preempt\n')
