"""``tether replay --diff`` on logs written by an earlier tether: what that version decided must still re-derive.

The logs in ``data/`` were written by tether at commit 70cea98 (before Kubernetes Events on ResourceBindings were
decided): ``demo.jsonl.gz`` is ``tether demo``'s log (claims bound, bindings placed, a table moved, two bindings
rescheduled, a table not in the catalog); ``admission.jsonl.gz`` a daemon with the ResourceBinding webhook on the
emulator (a binding suspended for its data and resumed, one placed in the write, three queue-managed bindings of
which two are admitted and one held, a table moved). Each line is ``<stream> <record as tether encodes it>``, in
log order; :func:`load` appends them to a fresh SQLite log, which numbers them again from 1, as they were.

A newer tether decides more than the one that wrote these logs (the Events on bindings' transitions): ``--diff``
must not call that a difference — the decisions the old version made are all re-derived, and the new ones are
counted apart. A log that records any such Event was written by a version that decides them: there, one missing
is a difference like any other.
"""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from tether.adapters.cli import main
from tether.adapters.cli.replay.diff import Difference, diff
from tether.adapters.log.sqlite import SqliteLog
from tether.core.admission.data_hold import HOLD_PURPOSE
from tether.core.commands import AddFinalizer, EmitKubernetesEvent, StartTimer
from tether.core.envelope import CommandRecord, EventRecord, decode_command, decode_event

DATA = Path(__file__).parent / "data"
OLD_LOGS = ("demo.jsonl.gz", "admission.jsonl.gz")
EXPECTED = {"demo.jsonl.gz": {"Rescheduled"},  # (a first placement is no Event since issue 35)
            "admission.jsonl.gz": {"Suspended", "Rescheduled"}}


async def load(name: str, path: Path) -> SqliteLog:
    events: list[EventRecord] = []
    commands: list[CommandRecord] = []
    with gzip.open(DATA / name, "rt") as lines:
        for line in lines:
            stream, _, body = line.partition(" ")
            if stream == "events":
                events.append(decode_event(body))
            else:
                commands.append(decode_command(body))
    for record in [*events, *commands]:
        record.offset = 0  # the log numbers them again (from 1, as they were)
    log = await SqliteLog.open(str(path))
    await log.append("events", events)
    await log.append("commands", commands)
    return log


@pytest.mark.parametrize("name", OLD_LOGS)
async def test_an_old_log_re_derives_every_recorded_decision(name: str, tmp_path: Path) -> None:
    log = await load(name, tmp_path / "old.db")
    newer: list[Difference] = []
    retired: list[Difference] = []
    try:
        result, differences = await diff(log, newer=newer, retired=retired)
    finally:
        await log.close()
    assert result.events > 100
    assert [(d.kind, d.causation, d.detail) for d in differences] == []
    # what that version decided and this one does not (issue 35): claim finalizers and routine Events, set aside
    gone = [d.recorded.command for d in retired if d.kind == "extra" and d.recorded is not None]
    assert any(isinstance(c, AddFinalizer) for c in gone)
    assert {(c.event_type, c.reason) for c in gone if isinstance(c, EmitKubernetesEvent) and c.event_type == "Normal"
            } == {("Normal", "DataSourceBound")}  # (these logs predate Events on bindings)
    # what this version decides on top: the Events on the bindings' transitions and the timers bounding a hold for
    # data (--max-hold), and nothing else
    assert newer and {d.kind for d in newer} == {"missing"}
    commands = [d.replayed.command for d in newer if d.replayed is not None]
    events = [c for c in commands if not (isinstance(c, StartTimer) and c.purpose == HOLD_PURPOSE)]
    assert all(isinstance(e, EmitKubernetesEvent) and e.involved.kind == "ResourceBinding" for e in events)
    assert {e.reason for e in events if isinstance(e, EmitKubernetesEvent)} == EXPECTED[name]


async def test_a_new_log_missing_a_binding_event_is_a_difference(tmp_path: Path) -> None:
    """Only a log with no binding Event at all predates them: from a newer log, one missing is a difference."""
    log = await load("demo.jsonl.gz", tmp_path / "old.db")
    try:
        newer: list[Difference] = []
        await diff(log, newer=newer)
        kept = newer[0].replayed
        assert kept is not None
        kept.offset = 0
        await log.append("commands", [kept])  # as a newer tether would have recorded it: the rest now go missing
        again: list[Difference] = []
        _, differences = await diff(log, newer=again)
    finally:
        await log.close()
    assert again == []
    assert len(differences) == len(newer) - 1 and {d.kind for d in differences} == {"missing"}


@pytest.mark.parametrize("name", OLD_LOGS)
def test_replay_diff_of_an_old_log_reports_no_difference(name: str, tmp_path: Path) -> None:
    path = tmp_path / "old.db"

    async def write() -> None:
        await (await load(name, path)).close()

    asyncio.run(write())
    result = CliRunner().invoke(main, ["replay", str(path), "--diff"])
    assert result.exit_code == 0, result.output
    assert "no difference" in result.output
    assert "decision(s) this tether makes were not recorded" in result.output
