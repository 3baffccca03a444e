"""The pipelined executor loop (``adapters/daemon/executor_loop.py``) on the emulator and a real SQLite log.

Commands are appended straight to the commands stream and applied by the real :class:`KubeExecutor`; a
:class:`Gated` wrapper holds chosen commands until the test releases them, which is how a slow command (a catalog
lookup, a write retried after 409s) is made deterministic. No test asserts a duration: each waits for a state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.cli.record_lines import line
from tether.adapters.daemon.loops import Loops
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, DATASOURCES, KubeClient
from tether.adapters.kubernetes.executor import KubeExecutor
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import eventually
from tether.core.commands import (
    AddFinalizer,
    Command,
    CreateDataSource,
    EmitKubernetesEvent,
    SetBindingPlacement,
    UpdateClaimStatus,
    command_id,
    command_target,
)
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import CommandSucceeded, Event
from tether.core.identity import make_identity
from tether.core.keys import TEST_FINALIZER
from tether.core.kube import Condition, ObjectRef


class Gated:
    """A :class:`KubeExecutor` whose commands wait, one by one, for the test to open their gate."""

    def __init__(self, inner: KubeExecutor) -> None:
        self.inner = inner
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []  # command ids, in the order they reached the executor
        self.running: set[str] = set()

    def hold(self, record: CommandRecord) -> asyncio.Event:
        gate = self.gates[record.id] = asyncio.Event()
        return gate

    def handles(self, command: Command) -> bool:
        return self.inner.handles(command)

    async def apply(self, record: CommandRecord) -> list[Event]:
        self.started.append(record.id)
        self.running.add(record.id)
        try:
            gate = self.gates.get(record.id)
            if gate is not None:
                await gate.wait()
            return await self.inner.apply(record)
        finally:
            self.running.discard(record.id)


class Bench:
    """A namespace with claims, a SQLite log, and runtimes whose executor loop runs in a task."""

    def __init__(self, kube: KubeEnv, log: SqliteLog) -> None:
        self.kube = KubeClient(kube.api_client)
        self.kube_env = kube
        self.namespace = kube.namespace
        self.log = log
        self.refs: dict[str, ObjectRef] = {}
        self.loop: asyncio.Task[None] | None = None

    async def claim(self, name: str) -> ObjectRef:
        created = await self.kube.create(CLAIMS, manifests.claim(name, namespace=self.namespace, table=f"db.{name}"),
                                         namespace=self.namespace)
        ref = self.refs[name] = ObjectRef(api_version=created["apiVersion"], kind="DataSourceClaim", name=name,
                                          namespace=self.namespace, uid=created["metadata"]["uid"])
        return ref

    def status(self, claim: str, reason: str) -> CommandRecord:
        """A status write for ``claim`` whose content (and id) depends on ``reason``."""
        command = UpdateClaimStatus(claim=self.refs[claim], phase="Pending", bound_data_source="", conditions=(
            Condition(type="Bound", status="False", reason=reason, message=reason,
                      last_transition_time="2026-01-01T00:00:00Z", observed_generation=1),))
        return CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                             causation="0:1")

    async def binding(self, workload: str) -> ObjectRef:
        created = await self.kube.create(BINDINGS, manifests.resource_binding(workload, namespace=self.namespace),
                                         namespace=self.namespace)
        return ObjectRef(api_version=created["apiVersion"], kind="ResourceBinding", name=created["metadata"]["name"],
                         namespace=self.namespace, uid=created["metadata"]["uid"])

    async def append(self, *records: CommandRecord) -> list[CommandRecord]:
        out = await self.log.append("commands", list(records))
        return [r for r in out if isinstance(r, CommandRecord)]

    def start(self, executor: Gated, **options: Any) -> Loops:
        """Loops over ``executor``; no bookkeeping is deferred unless ``defer`` says so (the tests of the lane
        below), so that the other tests see commands start as they are read."""
        loops = Loops(self.log, executors=[executor], **{"defer": {}, **options})
        self.loop = asyncio.create_task(loops.execute_loop())
        return loops

    async def crash(self) -> None:
        """Stop the executor loop where it is (the process dies: nothing more is appended or committed)."""
        assert self.loop is not None
        self.loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.loop
        self.loop = None

    async def outcomes(self) -> dict[str, list[CommandSucceeded]]:
        """Every CommandSucceeded in the events stream, by command id, in log order."""
        out: dict[str, list[CommandSucceeded]] = {}
        async for records in self.log.read("events"):
            for record in records:
                assert isinstance(record, EventRecord)
                if isinstance(record.event, CommandSucceeded):
                    out.setdefault(record.event.command_id, []).append(record.event)
        return out

    async def position(self) -> int:
        return (await self.log.position("commands", consumer="executor")).get(0, 0)

    async def phase_reason(self, claim: str) -> str:
        obj = await self.kube.get(CLAIMS, claim, namespace=self.namespace)
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        return str(conditions[0]["reason"]) if conditions else ""


@pytest.fixture
async def bench(kube: KubeEnv, tmp_path: Path) -> AsyncIterator[Bench]:
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    log = await SqliteLog.open(tmp_path / "tether.db")
    b = Bench(kube, log)
    try:
        yield b
    finally:
        if b.loop is not None:
            await b.crash()
        await log.close()


async def test_a_slow_command_holds_back_neither_other_objects_nor_their_outcomes(bench: Bench) -> None:
    for name in ("slow", "fast1", "fast2"):
        await bench.claim(name)
    executor = Gated(KubeExecutor(bench.kube))
    slow, fast1, fast2 = await bench.append(bench.status("slow", "A"), bench.status("fast1", "A"),
                                            bench.status("fast2", "A"))
    gate = executor.hold(slow)
    bench.start(executor)

    # the two fast commands, read after the slow one, are applied and their outcomes appended meanwhile
    outcomes = await eventually(lambda: _have(bench, fast1.id, fast2.id), "the fast outcomes")
    assert slow.id not in outcomes and slow.id in executor.running
    assert await bench.phase_reason("fast1") == "A" and await bench.phase_reason("fast2") == "A"
    # ... but the position stays before the unfinished command: a crash now would apply it again
    assert await bench.position() == slow.offset - 1

    gate.set()
    await eventually(lambda: _have(bench, slow.id), "the slow outcome")
    await eventually(lambda: _at(bench, fast2.offset), "the position past every command")
    assert await bench.phase_reason("slow") == "A"


async def test_commands_of_one_object_run_in_order_and_a_queued_one_superseded_is_skipped(bench: Bench) -> None:
    await bench.claim("c")
    await bench.claim("other")
    executor = Gated(KubeExecutor(bench.kube))
    first, = await bench.append(bench.status("c", "First"))
    gate = executor.hold(first)
    runtime = bench.start(executor)
    await eventually(lambda: asyncio.sleep(0, first.id in executor.running), "the first command running")

    # queued behind the running one: B is superseded by C (same object, same purpose) before it starts
    b, other, c = await bench.append(bench.status("c", "B"), bench.status("other", "X"), bench.status("c", "C"))
    await eventually(lambda: _have(bench, other.id), "the other object's outcome")
    assert b.id not in executor.started and c.id not in executor.started  # nothing overtakes the running one

    gate.set()
    outcomes = await eventually(lambda: _have(bench, first.id, b.id, c.id), "every outcome")
    assert executor.started == [first.id, other.id, c.id]
    # skipped, never sent: recorded (and counted) as superseded by C, not as "already satisfied"
    assert outcomes[b.id][0].noop and outcomes[b.id][0].superseded_by == c.id
    assert not outcomes[c.id][0].noop and not outcomes[c.id][0].superseded_by
    counted = {(s.labels["command"], s.labels["outcome"]): s.value
               for metric in runtime.metrics.outcomes.collect() for s in metric.samples if s.name.endswith("_total")}
    assert counted == {("update_claim_status", "ok"): 3, ("update_claim_status", "superseded"): 1}
    told = [line(r).plain async for records in bench.log.read("events") for r in records if r.causation == b.id]
    assert len(told) == 1 and f"update_claim_status superseded by {c.id}" in told[0], told  # tether log tail's line
    assert "already satisfied" not in told[0]
    assert await bench.phase_reason("c") == "C"
    await eventually(lambda: _at(bench, c.offset), "the position past every command")


async def test_restart_after_a_crash_mid_flight_applies_the_unfinished_command_again(bench: Bench) -> None:
    for name in ("done", "stuck", "after"):
        await bench.claim(name)
    executor = Gated(KubeExecutor(bench.kube))
    done, = await bench.append(bench.status("done", "A"))
    bench.start(executor)
    await eventually(lambda: _at(bench, done.offset), "the first command committed")
    stuck, after = await bench.append(bench.status("stuck", "A"), bench.status("after", "A"))
    executor.hold(stuck)  # never released: the process dies with it in flight
    await eventually(lambda: _have(bench, after.id), "the outcome of the command after the stuck one")
    assert await bench.position() == stuck.offset - 1
    await bench.crash()
    assert await bench.phase_reason("stuck") == ""  # never written

    again = Gated(KubeExecutor(bench.kube))
    loops = bench.start(again)
    await eventually(lambda: _at(bench, after.offset), "the position past every command after the restart")
    await eventually(lambda: _have(bench, stuck.id), "the stuck command's outcome")
    assert done.id not in again.started  # before the committed position: never applied again
    assert again.started[0] == stuck.id  # the unfinished command is applied again, first
    assert await bench.phase_reason("stuck") == "A"
    outcomes = await bench.outcomes()
    assert len(outcomes[stuck.id]) == 1 and not outcomes[stuck.id][0].noop
    # the command after it had finished before the crash, but the position could not pass the stuck one:
    # at-least-once applies it again, and the executor's compare makes that a no-op, not a second write
    assert [o.noop for o in outcomes[after.id]] == [False, True]
    assert loops.applied_commands == 2


def record(command: Command) -> CommandRecord:
    return CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                         causation="0:1")


async def test_the_binding_write_is_sent_before_the_claim_writes_decided_with_it(bench: Bench) -> None:
    """One decision yields the claim's writes first and the binding's last; the binding's goes out first."""
    await bench.kube_env.register_crds("work.karmada.io_resourcebindings")
    claim = await bench.claim("c")
    binding = await bench.binding("w")
    finalizer, status, placement = await bench.append(
        record(AddFinalizer(target=claim, finalizer=TEST_FINALIZER)), bench.status("c", "Bound"),
        record(SetBindingPlacement(binding=binding, excluded_clusters=("west1",))))
    executor = Gated(KubeExecutor(bench.kube))
    bench.start(executor)
    await eventually(lambda: _at(bench, placement.offset), "every command applied")
    assert executor.started == [placement.id, finalizer.id, status.id]
    rb = await bench.kube.get(BINDINGS, binding.name, namespace=bench.namespace)
    assert rb is not None and rb["spec"]["placement"]["clusterAffinity"]["exclude"] == ["west1"]


async def test_a_miss_places_its_binding_before_creating_its_datasource(bench: Bench) -> None:
    """A cache miss's decision creates the DataSource and places the binding from the lookup's answer: the
    placement is sent first and the creation waits until it is done (on the server at the same moment, a creation
    made a miss's placement two to three times slower than a hit's)."""
    await bench.kube_env.register_crds("work.karmada.io_resourcebindings", "datadependency.volcano.sh_datasources")
    binding = await bench.binding("w")
    name = f"ds-{bench.namespace}"

    async def remove() -> None:  # cluster-scoped, with tether's finalizer: released and deleted, on a shared cluster
        if await bench.kube.get(DATASOURCES, name) is not None:
            await bench.kube.patch(DATASOURCES, name, {"metadata": {"finalizers": None}})
            await bench.kube.delete(DATASOURCES, name)
    bench.kube_env.defer(remove)
    create, placement = await bench.append(
        record(CreateDataSource(name=name, identity=make_identity("amoro", "table", f"db.{name}", None),
                                cluster_names=("east1",), location="s3://east/t")),
        record(SetBindingPlacement(binding=binding, excluded_clusters=("west1",))))
    executor = Gated(KubeExecutor(bench.kube))
    gate = executor.hold(placement)
    bench.start(executor)
    await eventually(lambda: asyncio.sleep(0, placement.id in executor.running), "the placement running")
    await asyncio.sleep(0.2)
    assert create.id not in executor.started  # the creation waits for the placement running when its turn came
    gate.set()
    await eventually(lambda: _have(bench, create.id, placement.id), "both outcomes")
    assert executor.started == [placement.id, create.id]


async def test_other_writes_wait_for_the_binding_write_running_when_their_turn_came(bench: Bench) -> None:
    """While a binding write is being applied, the status writes read with it wait; other bindings' do not."""
    await bench.kube_env.register_crds("work.karmada.io_resourcebindings")
    await bench.claim("c")
    slow_binding, fast_binding = await bench.binding("w1"), await bench.binding("w2")
    slow, status, fast = await bench.append(
        record(SetBindingPlacement(binding=slow_binding, excluded_clusters=("west1",))), bench.status("c", "Bound"),
        record(SetBindingPlacement(binding=fast_binding, excluded_clusters=("west1",))))
    executor = Gated(KubeExecutor(bench.kube))
    gate = executor.hold(slow)
    bench.start(executor)

    # the other binding write is not held back by the running one, and its outcome is appended...
    await eventually(lambda: _have(bench, fast.id), "the other binding's outcome")
    # ... while the claim's status write still waits for the binding write that was running when it was read
    assert status.id not in executor.started and slow.id in executor.running

    gate.set()
    outcomes = await eventually(lambda: _have(bench, slow.id, status.id), "every outcome")
    assert executor.started == [slow.id, fast.id, status.id]
    assert not outcomes[status.id][0].noop and await bench.phase_reason("c") == "Bound"
    await eventually(lambda: _at(bench, fast.offset), "the position past every command")


async def test_a_status_write_is_held_only_by_the_binding_writes_running_when_its_turn_came(bench: Bench) -> None:
    """A stream of later binding writes never starves a waiting write: it waits for the running ones only."""
    await bench.kube_env.register_crds("work.karmada.io_resourcebindings")
    await bench.claim("c")
    first_binding, later_binding = await bench.binding("w1"), await bench.binding("w2")
    first, status = await bench.append(record(SetBindingPlacement(binding=first_binding, excluded_clusters=("a",))),
                                       bench.status("c", "Bound"))
    executor = Gated(KubeExecutor(bench.kube))
    first_gate = executor.hold(first)
    bench.start(executor)
    await eventually(lambda: asyncio.sleep(0, first.id in executor.running), "the first binding write running")

    later, = await bench.append(record(SetBindingPlacement(binding=later_binding, excluded_clusters=("b",))))
    later_gate = executor.hold(later)  # still running when the status write may go
    await eventually(lambda: asyncio.sleep(0, later.id in executor.running), "the later binding write running")
    assert status.id not in executor.started

    first_gate.set()
    await eventually(lambda: _have(bench, first.id, status.id), "the status write, past the first binding write")
    assert later.id in executor.running  # the status write did not wait for the binding write started after it
    later_gate.set()
    await eventually(lambda: _at(bench, later.offset), "the position past every command")


async def _have(bench: Bench, *ids: str) -> dict[str, list[CommandSucceeded]] | None:
    outcomes = await bench.outcomes()
    return outcomes if all(i in outcomes for i in ids) else None


async def _at(bench: Bench, offset: int) -> bool:
    return await bench.position() >= offset


# --- the bookkeeping lane (runtime.py, "bookkeeping waits, and coalesces") ---------------------------------------


async def test_a_bookkeeping_write_waits_for_its_deadline_and_a_later_one_of_its_object_replaces_it(
        bench: Bench) -> None:
    await bench.claim("c")
    executor = Gated(KubeExecutor(bench.kube))
    bench.start(executor, defer={UpdateClaimStatus: 0.5})
    waiting, = await bench.append(bench.status("c", "Waiting"))
    await asyncio.sleep(0.1)
    assert waiting.id not in executor.started  # deferred: not started before its deadline
    bound, = await bench.append(bench.status("c", "Bound"))
    outcomes = await eventually(lambda: _have(bench, waiting.id, bound.id), "both outcomes")
    assert outcomes[waiting.id][0].noop and waiting.id not in executor.started  # replaced before it ran: no write
    assert not outcomes[bound.id][0].noop and executor.started == [bound.id]
    assert await bench.phase_reason("c") == "Bound"


async def test_later_writes_of_an_object_cannot_postpone_its_bookkeeping_for_ever(bench: Bench) -> None:
    """The deadline is the slot's, set by the first command queued there: a stream of replacements is written
    while it still flows."""
    await bench.claim("c")
    executor = Gated(KubeExecutor(bench.kube))
    bench.start(executor, defer={UpdateClaimStatus: 0.3})
    for i in range(200):
        await bench.append(bench.status("c", f"Step{i}"))
        if executor.started:
            break
        await asyncio.sleep(0.05)
    assert executor.started, "no write while later ones kept coming"
    assert i < 199


async def test_bookkeeping_does_not_start_while_a_placement_waits_to_start(bench: Bench) -> None:
    await bench.kube_env.register_crds("work.karmada.io_resourcebindings")
    await bench.claim("c")
    one, two = await bench.binding("w1"), await bench.binding("w2")
    first, second = (record(SetBindingPlacement(binding=b, excluded_clusters=("a",))) for b in (one, two))
    first, second, status = await bench.append(first, second, bench.status("c", "Bound"))
    executor = Gated(KubeExecutor(bench.kube))
    gate = executor.hold(first)
    bench.start(executor, defer={UpdateClaimStatus: 0.0}, concurrency=1)
    await eventually(lambda: asyncio.sleep(0, first.id in executor.running), "the first placement running")
    await asyncio.sleep(0.2)
    assert status.id not in executor.started  # the second placement waits for a slot: bookkeeping waits too
    gate.set()
    await eventually(lambda: _have(bench, first.id, second.id, status.id), "every outcome")
    assert executor.started.index(status.id) > executor.started.index(second.id)


async def test_bookkeeping_waits_until_the_placements_pause(bench: Bench) -> None:
    """Placements arriving closer together than ``bookkeeping_lull``: a status write due meanwhile starts only once
    they pause, after the last of them (the API server serves a stream of placements alone)."""
    await bench.kube_env.register_crds("work.karmada.io_resourcebindings")
    await bench.claim("c")
    bindings = [await bench.binding(f"w{i}") for i in range(8)]
    executor = Gated(KubeExecutor(bench.kube))
    bench.start(executor, defer={UpdateClaimStatus: 0.0}, bookkeeping_lull=1.0, bookkeeping_patience=30.0)
    placements = []
    placement, = await bench.append(record(SetBindingPlacement(binding=bindings[0], excluded_clusters=("a",))))
    placements.append(placement)
    await eventually(lambda: asyncio.sleep(0, placement.id in executor.started), "the first placement started")
    status, = await bench.append(bench.status("c", "Bound"))
    for binding in bindings[1:]:
        await asyncio.sleep(0.05)
        placement, = await bench.append(record(SetBindingPlacement(binding=binding, excluded_clusters=("a",))))
        placements.append(placement)
        assert status.id not in executor.started, "a status write started while placements kept coming"
    await eventually(lambda: _have(bench, status.id, *(p.id for p in placements)), "every outcome")
    assert executor.started[-1] == status.id  # after every placement of the stream


async def test_a_placement_never_waits_behind_bookkeeping_on_its_object(bench: Bench) -> None:
    """An Event on a binding is deferred on a queue of its own: the binding's placement, read after it, goes at
    once."""
    await bench.kube_env.register_crds("work.karmada.io_resourcebindings")
    binding = await bench.binding("w")
    event = record(EmitKubernetesEvent(involved=binding, event_type="Normal", reason="Probe", message="probe"))
    placement = record(SetBindingPlacement(binding=binding, excluded_clusters=("a",)))
    event, placement = await bench.append(event, placement)
    executor = Gated(KubeExecutor(bench.kube))
    bench.start(executor, defer={EmitKubernetesEvent: 30.0})
    await eventually(lambda: _have(bench, placement.id), "the placement applied")
    assert event.id not in executor.started


async def test_a_stream_of_placements_that_never_lets_up_cannot_starve_bookkeeping(bench: Bench) -> None:
    """Placements go first, but a deferred write yields to them for ``bookkeeping_patience`` at most: then it
    queues for a slot in turn, however many placements keep waiting."""
    await bench.kube_env.register_crds("work.karmada.io_resourcebindings")
    await bench.claim("c")
    bindings = [await bench.binding(f"w{i}") for i in range(40)]
    executor = Gated(KubeExecutor(bench.kube))
    running, = await bench.append(record(SetBindingPlacement(binding=bindings[0], excluded_clusters=("a",))))
    gates = {running.id: executor.hold(running)}
    bench.start(executor, defer={UpdateClaimStatus: 0.0}, concurrency=1, bookkeeping_patience=0.3)
    await eventually(lambda: asyncio.sleep(0, running.id in executor.running), "a placement running")
    status, = await bench.append(bench.status("c", "Bound"))
    for binding in bindings[1:]:  # one runs and another always waits for the only slot: the stream never lets up
        waiting, = await bench.append(record(SetBindingPlacement(binding=binding, excluded_clusters=("a",))))
        gates[waiting.id] = executor.hold(waiting)
        await asyncio.sleep(0.05)
        gates[running.id].set()
        running = waiting
        if status.id in executor.started:
            break
    assert status.id in executor.started, "the status write waited for as long as placements kept coming"
    for gate in gates.values():
        gate.set()
