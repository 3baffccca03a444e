"""Volcano Global's dispatcher tests, reproduced: round robin across queues, and the queue capability check."""

from __future__ import annotations

import pytest

from tether.core.admission.config import parse_admission_config
from tether.core.admission.model import Binding, ClusterCapacity
from tether.core.admission.session import admission_cycle
from tether.core.quantity import resource_list
from tether.core.world.admission_state import DEFAULT_ADMISSION_CONFIG, AdmissionConfig, Queue

#: Volcano Global's own dispatcher: priority order and the capacity limit, nothing else
DISPATCHER_LIKE = parse_admission_config("""
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: capacity
""")

CONFIGS = pytest.mark.parametrize("config", [DISPATCHER_LIKE, DEFAULT_ADMISSION_CONFIG], ids=["dispatcher", "default"])
#: the dispatcher tests' total: 100 CPU, 100G
CLUSTERS = [ClusterCapacity(name="member1", allocatable=resource_list({"cpu": "100", "memory": "100G"}))]


def rb(name: str, queue: str, created: int, *, replicas: int = 1, cpu: str = "1", memory: str = "1G",
       suspended: bool = True) -> Binding:
    return Binding(key=f"default/{name}", queue=queue, creation_ms=created, uid=name, replicas=replicas,
                   request=resource_list({"cpu": cpu, "memory": memory}), suspended=suspended)


@CONFIGS
def test_single_queue_in_creation_order(config: AdmissionConfig) -> None:
    out = admission_cycle(queues=[Queue(name="queue1", creation_ms=1)],
                          bindings=[rb("rb2", "queue1", 20), rb("rb1", "queue1", 10)], clusters=CLUSTERS, config=config)
    assert out.resume == ("default/rb1", "default/rb2")


@CONFIGS
def test_two_queues_round_robin(config: AdmissionConfig) -> None:
    queues = [Queue(name="queue2", creation_ms=2), Queue(name="queue1", creation_ms=1)]
    bindings = [rb(f"rb{i}", "queue1" if i <= 3 else "queue2", i) for i in (6, 3, 5, 1, 4, 2)]
    out = admission_cycle(queues=queues, bindings=bindings, clusters=CLUSTERS, config=config)
    assert out.resume == tuple(f"default/rb{i}" for i in (1, 4, 2, 5, 3, 6))
    assert out.held == ()
    assert [(q.name, q.admitted, q.pending) for q in out.queues] == [("queue1", 3, 0), ("queue2", 3, 0)]


@CONFIGS
@pytest.mark.parametrize(("replicas", "admitted"), [(2, True), (4, False)], ids=["2+2 admitted", "2+4 rejected"])
def test_five_cpu_queue(config: AdmissionConfig, replicas: int, admitted: bool) -> None:
    queue = Queue(name="queue1", capability=resource_list({"cpu": "5", "memory": "5G"}))
    bindings = [rb("rb1", "queue1", 1, replicas=2, suspended=False), rb("rb2", "queue1", 2, replicas=replicas)]
    out = admission_cycle(queues=[queue], bindings=bindings, clusters=CLUSTERS, config=config)
    assert out.resume == (("default/rb2",) if admitted else ())
    if not admitted:
        assert [(h.binding, h.plugin, h.reason) for h in out.held] == [
            ("default/rb2", "capacity", "queue queue1: cpu 6/5")]


@CONFIGS
def test_one_fits_the_next_does_not(config: AdmissionConfig) -> None:
    queue = Queue(name="queue1", capability=resource_list({"cpu": "5", "memory": "5G"}))
    bindings = [rb("rb1", "queue1", 1, replicas=2, suspended=False), rb("rb2", "queue1", 2, replicas=2),
                rb("rb3", "queue1", 3, cpu="2", memory="2G")]
    out = admission_cycle(queues=[queue], bindings=bindings, clusters=CLUSTERS, config=config)
    assert out.resume == ("default/rb2",)
    assert [h.binding for h in out.held] == ["default/rb3"]
    status = out.queues[0]
    assert status.allocated == resource_list({"cpu": "4", "memory": "4G"})
    assert (status.admitted, status.resumed, status.pending) == (2, 1, 1)
    assert status.pending_request == resource_list({"cpu": "2", "memory": "2G"})


@CONFIGS
def test_a_binding_that_does_not_fit_does_not_block_the_next(config: AdmissionConfig) -> None:
    queue = Queue(name="queue1", capability=resource_list({"cpu": "3"}))
    bindings = [rb("big", "queue1", 1, cpu="4"), rb("small", "queue1", 2, cpu="2")]
    out = admission_cycle(queues=[queue], bindings=bindings, clusters=CLUSTERS, config=config)
    assert out.resume == ("default/small",)
    assert out.held[0].reason == "queue queue1: cpu 4/3"


@CONFIGS
def test_a_queue_out_of_cpu_still_admits_a_binding_that_asks_for_no_cpu(config: AdmissionConfig) -> None:
    """Once the queue's CPU is used up, the bindings asking for CPU are held at once; one asking for memory only
    is still offered, and admitted."""
    queue = Queue(name="queue1", capability=resource_list({"cpu": "2"}))
    bindings = [rb("running", "queue1", 1, cpu="2", suspended=False), rb("cpu", "queue1", 2, cpu="1"),
                rb("more-cpu", "queue1", 3, cpu="1"), rb("memory-only", "queue1", 4, cpu="0", memory="1G")]
    out = admission_cycle(queues=[queue], bindings=bindings, clusters=CLUSTERS, config=config)
    assert out.resume == ("default/memory-only",)
    assert sorted(h.binding for h in out.held) == ["default/cpu", "default/more-cpu"]
