"""Every metric tether exports, asserted after a scenario against what it counts (issue 22 item 3).

The scenario runs the daemon with the binding webhook and queue admission on (``admission_stack``) in a namespace
whose Deployments are queue-managed, against a Queue that admits one CPU:

* ``orders`` — a claim on a table in the east, Bound; its Deployment's binding is injected (the west excluded) and
  admitted (1 CPU fits);
* ``late`` — a second Deployment's binding in the same queue: held by the queue (2 CPU > 1);
* ``clicks`` — a claim whose catalog lookup does not answer (until the end); its Job's binding (Jobs are not
  queue-managed) is held by the webhook for its data.

Then every exported sample is checked, each against its own ground truth: the state gauges against the scenario;
the counters and histogram counts against the records in the daemon's log (events folded by type, commands by
type, executor outcomes by command and outcome, webhook answers by outcome, admission cycles); the lag against the
idle daemon; the watch counters against the daemon's watch sources. A metric the test has no expectation for
fails it, so a new metric comes with its check.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tether.adapters.daemon.metrics import METRIC_NAMES
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import DEPLOYMENTS, QUEUES, KubeError
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack
from tether.core.admission.data_hold import HOLD_PURPOSE
from tether.core.commands import command_name
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import (
    BindingAdmissionDecided,
    CommandFailed,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    TimerFired,
)
from tether.core.keys import ADMISSION_ANNOTATION

from .test_admission_e2e import admission_stack, binding
from .test_daemon import http_get

pytestmark = pytest.mark.cluster

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(text: str) -> Samples:
    """``/metrics`` → {(sample name, sorted labels): value}, without the ``_created`` timestamps."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def pick(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def by(samples: Samples, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """The samples of ``name`` keyed by the values of ``keys`` (the labels a test cares about)."""
    return {tuple(dict(labels)[k] for k in keys): value for labels, value in pick(samples, name).items()}


async def log_truth(stack: Stack) -> dict[str, Counter[Any]]:
    """What the metrics count, counted from the daemon's log: the events up to the decider's committed position (what
    it folded), every command (each was committed with the position that decided it)."""
    assert stack.log is not None
    folded = (await stack.log.position("events", consumer="decider")).get(0, 0)
    events: list[EventRecord] = [r async for batch in stack.log.read("events", until_offset=folded)
                                 for r in batch]  # type: ignore[misc]
    commands: list[CommandRecord] = [r async for batch in stack.log.read("commands")
                                     for r in batch]  # type: ignore[misc]
    names = {c.id: command_name(c.command) for c in commands}
    outcomes: Counter[tuple[str, str]] = Counter()
    lookups: Counter[tuple[str, str]] = Counter()
    for record in events:
        event = record.event
        if record.source != "executor":
            continue
        command = names[record.causation]
        if isinstance(event, CommandSucceeded):
            outcomes[(command, "superseded" if event.superseded_by else "noop" if event.noop else "ok")] += 1
        elif isinstance(event, CommandFailed):
            outcomes[(command, "failed")] += 1
        else:
            outcomes[(command, "answered")] += 1
        if isinstance(event, DataLocationResolved | DataSourceNotInCatalog | DataLocationLookupFailed):
            kind = {DataLocationResolved: "resolved", DataSourceNotInCatalog: "not-found",
                    DataLocationLookupFailed: "failed"}[type(event)]
            lookups[(event.identity.system, kind)] += 1
    decisions = [r.event for r in events if isinstance(r.event, BindingAdmissionDecided)]
    return {
        "events": Counter(type(r.event).__name__ for r in events),
        "commands": Counter(names.values()),
        "outcomes": outcomes,
        "lookups": lookups,
        "webhook": Counter("patched" if d.patch else "allowed" for d in decisions),
        "cycles": Counter(r.event.purpose for r in events if isinstance(r.event, TimerFired)),
    }


async def test_every_metric_tells_the_truth_after_a_scenario(karmada_kube: KubeEnv, tmp_path: Path) -> None:
    # one attempt per lookup, given all the time it takes: the delayed lookup stays in flight
    patient = {"retryConfig": {"maxRetries": 0, "initialBackoff": "10ms", "maxBackoff": "50ms", "timeout": "300s"}}
    async with admission_stack(karmada_kube, tmp_path, managed=True, plugin_options=patient) as stack:
        queue = f"q-{stack.suffix}"
        await stack.kube.create(QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                         "metadata": {"name": queue}, "spec": {"weight": 1,
                                                                                 "capability": {"cpu": "1"}}})
        try:
            for name in ("orders", "late"):
                deployment = manifests.deployment(name, namespace=stack.namespace, replicas=0)
                deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": queue}
                await stack.kube.create(DEPLOYMENTS, deployment, namespace=stack.namespace)
            orders = stack.add_table("orders", "east")
            await stack.apply(manifests.claim("orders", namespace=stack.namespace, table=orders, workload="orders"))
            await stack.wait_claim("orders", phase="Bound")
            await stack.wait_idle()
            await stack.apply(binding(stack, "orders-deployment", "orders"))
            await stack.apply(binding(stack, "late-deployment", "late", cpu="2"))
            clicks = stack.add_table("clicks", "west")
            stack.catalog.delay_next(1, 240, table=clicks)  # no answer during the test: the claim keeps resolving
            await stack.apply(manifests.claim("clicks", namespace=stack.namespace, table=clicks, workload="train",
                                              workload_kind="Job", workload_api_version="batch/v1"))
            await stack.wait_claim("clicks", reason="Resolving")
            job = binding(stack, "train-job", "train")
            job["spec"]["resource"].update(apiVersion="batch/v1", kind="Job")
            held = await stack.apply(job)
            assert held["spec"]["suspension"] == {"scheduling": True} and ADMISSION_ANNOTATION in \
                held["metadata"]["annotations"]

            foreign: Counter[str] = Counter()

            async def settled() -> Samples | None:  # (the state gauges are set once a second)
                status, text = await http_get(stack, "/metrics")
                samples = scrape(text)
                # DataSources are cluster-scoped: on a shared cluster the daemon also counts other runs' ones
                foreign.clear()
                foreign.update(world_gauges_of_foreign_sources(stack))
                want = {("tether_datasources", (("state", "located"),)): 1.0 + foreign["located"],
                        ("tether_datasources", (("state", "unlocated"),)): float(foreign["unlocated"]),
                        ("tether_bindings_held", (("reason", "queue"),)): 1.0,
                        ("tether_bindings_held", (("reason", "data"),)): 1.0,
                        ("tether_bindings_injected", ()): 1.0,
                        ("tether_admission_bindings", (("queue", queue), ("state", "admitted"))): 1.0,
                        ("tether_consumer_lag_records", (("consumer", "decider"),)): 0.0}
                return samples if status == 200 and all(samples.get(k) == v for k, v in want.items()) else None

            running = await stack.eventually(settled, within=30, what="the scenario settled in the gauges")
            assert stack.daemon is not None
            timers = [t.purpose for t in stack.daemon.world.timers.values()]
            # the catalog answers at last; once the daemon is idle and then stopped, the counters are final and the
            # log is complete up to the decider's committed position
            stack.catalog.release_delays()
            await stack.wait_claim("clicks", phase="Bound")
            await stack.wait_idle()
            assert await stack.stop_daemon() == 0
            stopped = scrape(generate_latest(stack.daemon.metrics.registry).decode())
            truth = await log_truth(stack)
            check_every_metric(running, stopped, truth, stack, queue=queue, timers=timers, foreign=foreign)
        finally:
            with contextlib.suppress(KubeError):
                await stack.kube.delete(QUEUES, queue)


def world_gauges_of_foreign_sources(stack: Stack) -> Counter[str]:
    """The DataSources of the daemon's world that are not this test's (none on the emulator), by the gauge's
    state: the test's own table names carry its suffix."""
    assert stack.daemon is not None
    return Counter("deleting" if source.deleting else "located" if source.location else "unlocated"
                   for name, source in list(stack.daemon.world.sources.items()) if f".{stack.suffix}." not in name)


def check_every_metric(running: Samples, stopped: Samples, truth: dict[str, Counter[Any]], stack: Stack, *,
                       queue: str, timers: list[str], foreign: Counter[str]) -> None:
    """``running``: a scrape once the scenario settled; ``stopped``: the registry after the daemon stopped (the
    counters final, the log complete)."""
    daemon = stack.daemon
    assert daemon is not None
    checked: set[str] = set()

    def expect(name: str, want: dict[tuple[str, ...], float], *keys: str, samples: Samples = running) -> None:
        got = by(samples, name, *keys)
        assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}, name
        checked.add(name)

    # the replica acted — no leader election, so it is the only one there is — and stopped acting when it stopped
    expect("tether_leader", {(): 1})
    expect("tether_leader", {}, samples=stopped)
    # the world
    expect("tether_claims", {("Bound",): 1, ("Pending",): 1}, "phase")
    # orders' DataSource (clicks' is created once the catalog answers), and the cluster's others: on the emulator
    # a foreign one without a location, on a shared real cluster whatever other runs left
    expect("tether_datasources", {("located",): 1 + foreign["located"], ("unlocated",): foreign["unlocated"],
                                  ("deleting",): foreign["deleting"]}, "state")
    expect("tether_bindings", {(): 3})
    expect("tether_bindings_injected", {(): 1})  # orders-deployment: its claim's data is in the east
    expect("tether_bindings_held", {("queue",): 1, ("data",): 1}, "reason")  # late-deployment; train-job
    expect("tether_lookups_in_flight", {(): 1})  # clicks, unanswered
    expect("tether_lists_pending", {})
    # armed timers: the admission cycle (a binding waits in its queue) and the bound of train-job's data hold
    expect("tether_timers_pending", {(): 2})
    assert sorted(timers) == sorted(["admission-cycle", HOLD_PURPOSE])
    expect("tether_admission_bindings", {(queue, "admitted"): 1, (queue, "held"): 1}, "queue", "state")
    expect("tether_admission_config_valid", {(): 1})
    expect("tether_plugin_config_valid", {("amoro",): 1}, "system")  # the stack's plugin ConfigMap, accepted
    # no locality tiers in this scenario: every setting accepted, no binding placed by tiers
    expect("tether_locality_config_valid", {(): 1})
    expect("tether_bindings_by_tier", {}, "tier")
    expect("tether_admission_checks", {}, "check", "state")  # no queue names a check here
    # the loops: the decider caught up; the executor's committed position waits behind the lookup in flight (the
    # commands after it are applied, their position is committed in order), so its lag is at least that one
    lag = by(running, "tether_consumer_lag_records", "consumer")
    assert set(lag) == {("decider",), ("executor",)} and lag[("decider",)] == 0 and lag[("executor",)] >= 1
    checked.add("tether_consumer_lag_records")
    rate = by(running, "tether_events_per_second")[()]
    assert 0 < rate <= sum(truth["events"].values())  # folded within the last 10 s, at most all of them
    checked.add("tether_events_per_second")
    # the watches: every source counted, none failed; the optional ones (Queues, PriorityClasses) are served
    names = {source.name for source in daemon.sources}
    assert set(by(running, "tether_watch_errors_total", "resource")) == {(n,) for n in names}
    assert all(s.errors == 0 for s in daemon.sources)
    expect("tether_watch_errors_total", {}, "resource")
    absent_ok = {s.name for s in daemon.sources if s.absent_ok}
    assert absent_ok and set(by(running, "tether_watch_resource_absent", "resource")) == {(n,) for n in absent_ok}
    expect("tether_watch_resource_absent", {}, "resource")
    # one writer: nothing of tether's changed by anyone else (the webhook's and Karmada's writes are not competing)
    expect("tether_competing_writes_total", {}, "kind", samples=stopped)
    # a handful of Events, none cut for flooding one object (tests/integration/test_event_recorder.py cuts some)
    expect("tether_events_dropped_total", {}, samples=stopped)
    # the test process's daemon does not freeze its heap (tether_stack): nothing frozen, and it says so
    expect("tether_gc_frozen_objects", {})

    # counters, final, against the log
    expect("tether_events_total", {(k,): v for k, v in truth["events"].items()}, "type", samples=stopped)
    expect("tether_commands_total", {(k,): v for k, v in truth["commands"].items()}, "command", samples=stopped)
    expect("tether_command_outcomes_total", dict(truth["outcomes"]), "command", "outcome", samples=stopped)
    expect("tether_catalog_lookups_total", dict(truth["lookups"]), "system", "outcome", samples=stopped)
    assert truth["lookups"] == {("amoro", "resolved"): 2}  # orders, and clicks once released
    # histograms: one observation per thing timed
    expect("tether_decision_latency_seconds_count", {(): sum(truth["events"].values())}, samples=stopped)
    applied = Counter[str]()
    for (command, outcome), n in truth["outcomes"].items():
        applied[command] += n if outcome != "superseded" else 0  # (skipped: never applied, never timed)
    expect("tether_command_apply_seconds_count", {(k,): v for k, v in applied.items()}, "command", samples=stopped)
    expect("tether_webhook_seconds_count", {("/mutate/resourcebindings", k): v for k, v in truth["webhook"].items()},
           "webhook", "outcome", samples=stopped)
    assert truth["webhook"]["patched"] >= 3  # each CREATE: a constraint, a queue hold, a data hold
    expect("tether_admission_cycle_seconds_count", {(): truth["cycles"]["admission-cycle"]}, samples=stopped)
    assert truth["cycles"]["admission-cycle"] >= 1
    for histogram in ("tether_decision_latency_seconds", "tether_command_apply_seconds", "tether_webhook_seconds",
                      "tether_admission_cycle_seconds"):
        for (name, labels), value in stopped.items():
            if name == f"{histogram}_sum":
                assert value >= 0 and math.isfinite(value), (name, labels)
            if name == f"{histogram}_bucket" and dict(labels)["le"] == "+Inf":
                count = stopped[(f"{histogram}_count", tuple(kv for kv in labels if kv[0] != "le"))]
                assert value == count, (name, labels)
        checked |= {f"{histogram}_sum", f"{histogram}_bucket"}
    # nothing exported goes unchecked, and nothing is exported that metrics.py does not declare
    exported = {name for name, _ in running} | {name for name, _ in stopped}
    assert exported <= set(METRIC_NAMES)
    assert exported - checked == set(), f"metrics without an expectation: {sorted(exported - checked)}"
