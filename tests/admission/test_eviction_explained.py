"""Evictions in the log: ``tether replay --explain`` shows who preempted whom and why (from either side),
``--what-if`` the evictions a policy would have made, ``--diff`` re-derives them, and ``tether status`` shows each
queue's policy and what it is charged."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner

from tether.adapters.cli import main
from tether.adapters.cli.replay.diff import diff
from tether.adapters.cli.replay.trail import explain
from tether.adapters.cli.replay.whatif import Candidate, what_if
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.fake_cluster import Harness
from tether.core.commands import EvictBinding, ResumeBinding

from .test_eviction_decider import PREEMPTING, binding, scheduled, universe

HIGH, LOW = "ResourceBinding/default/high", "ResourceBinding/default/low-2"


def history(conf: str) -> Harness:
    """Two 400m low bindings admitted and placed on a 1-CPU queue, then a 600m high one, under ``conf``."""
    h = universe(queues={"q1": {"capability": {"cpu": "1"}}}, conf=conf)
    binding(h, "low-1", "q1", cpu="400m", created="2026-01-01T00:00:00Z")
    binding(h, "low-2", "q1", cpu="400m", created="2026-01-01T00:00:01Z")
    h.advance(1_000)
    scheduled(h, "low-1")
    scheduled(h, "low-2")
    binding(h, "high", "q1", cpu="600m", created="2026-01-01T00:00:02Z", priority=100)
    h.advance(3_000)
    return h


async def logged(h: Harness, path: Path) -> SqliteLog:
    """The harness's log as tether writes it (both streams; the offsets are the harness's, from 1)."""
    log = await SqliteLog.open(str(path))
    for record in [*h.events, *h.commands]:
        record.offset = 0
    await log.append("events", h.events)
    await log.append("commands", h.commands)
    return log


async def written(h: Harness, path: Path) -> None:
    await (await logged(h, path)).close()


async def test_explain_shows_who_evicted_whom_and_why_from_either_side(tmp_path: Path) -> None:
    log = await logged(history(PREEMPTING), tmp_path / "t.db")
    try:
        high = await explain(log, HIGH)
        low = await explain(log, LOW)
        _, differences = await diff(log)
    finally:
        await log.close()
    [eviction] = [c for cs in high.caused.values() for c in cs if isinstance(c.command, EvictBinding)]
    assert eviction.key == LOW and eviction.command.for_binding == "default/high"
    assert eviction.reason.startswith(f"{LOW} evicted: queue q1: evicted for default/high (priority 100 > 0")
    [resume] = [c for cs in high.caused.values() for c in cs if isinstance(c.command, ResumeBinding)]
    assert resume.command.reason == "admitted by queue q1, evicting default/low-2"
    assert resume.causation == eviction.causation  # one cycle decided both
    assert [c.key for cs in low.caused.values() for c in cs if isinstance(c.command, ResumeBinding)
            and c.causation == eviction.causation] == [HIGH]  # the evicted one's trail names whom it made room for
    assert differences == []  # the evictions re-derive from the log, byte for byte


def test_the_chain_on_the_command_line(tmp_path: Path) -> None:
    asyncio.run(written(history(PREEMPTING), tmp_path / "t.db"))
    for key in ("rb/default/high", "deploy/default/high"):  # the trail, and the workload's chain
        result = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--explain", key])
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())
        assert "EvictBinding" in text and "evict (preempt, queue q1) for default/high" in text, text
        assert "admitted by queue q1, evicting default/low-2" in text
    result = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--explain", "deploy/default/low-2"])
    text = " ".join(result.output.split())
    assert "evicted for default/high" in text and "ResumeBinding" in text


async def test_what_if_shows_the_evictions_a_policy_would_have_made(tmp_path: Path) -> None:
    h = history("")  # recorded without a policy: nothing evicted, high held
    assert not [c for c in h.commands if isinstance(c.command, EvictBinding)]
    log = await logged(h, tmp_path / "t.db")
    try:
        answer = await what_if(log, Candidate(admission={"queue-managed": "kinds: [apps/Deployment]\n",
                                                         "volcano-scheduler.conf": PREEMPTING}))
    finally:
        await log.close()
    assert [(e.binding, e.for_binding, e.policy, e.recorded) for e in answer.evictions] == [
        (LOW, "default/high", "preempt", False)]
    assert answer.evictions[0].reason.startswith("queue q1: evicted for default/high")
    moves = {m.binding: m for m in answer.moves}
    assert moves[LOW].held and moves[LOW].why[0].startswith("evicted: queue q1: evicted for default/high")
    assert moves[HIGH].admitted


def test_what_if_on_the_command_line(tmp_path: Path) -> None:
    asyncio.run(written(history(""), tmp_path / "t.db"))
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tether-admission, namespace: tether-system}\ndata:\n"
        "  queue-managed: 'kinds: [apps/Deployment]'\n  volcano-scheduler.conf: |\n"
        + "".join(f"    {line}\n" for line in PREEMPTING.splitlines()))
    result = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--what-if", str(candidate)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"{LOW} evicted for default/high (preempt, queue q1)" in text
    assert "1 eviction(s) the candidate would make, 0 it would not" in text
