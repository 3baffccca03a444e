"""``tether demo`` end to end, in-process: the README's first command must keep working (and stay quick)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tether.adapters.cli import main
from tether.adapters.sandbox.demo import EXPLAIN_BINDING, EXPLAIN_CLAIM


def test_demo_runs_end_to_end_and_leaves_a_replayable_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    log = Path("demo.db")  # relative, like the default ./tether-demo.db
    log.write_text("stale content from a previous run")  # overwritten, not appended to
    result = CliRunner().invoke(main, ["demo", "--log", str(log), "--speed", "20", "--no-live"])
    out = result.output
    assert result.exit_code == 0, out + repr(result.exception)

    # claims bound; the unknown table explained; the detector stand-in said so
    assert "4/5 claims Bound" in out
    assert "DataSourceNotFound" in out
    assert "there is no detector in the sandbox" in out
    assert "1 catalog lookup" in out  # two claims on one table → one DataSource, one lookup
    # both bindings on the moved table were rescheduled to the west
    for binding in ("analytics/clicks-dashboard-deployment", "ml/clicks-train-deployment"):
        assert re.search(rf"{binding}: scheduled to member1, member2 → member3", out), out
    # how to replay it
    assert f"tether replay {log} --explain {EXPLAIN_CLAIM}" in out
    assert f"tether log tail {log}" in out
    seconds = float(re.search(r"finished in ([\d.]+)s", out).group(1))  # type: ignore[union-attr]
    assert seconds < 30

    # the log it leaves is replayable
    explained = CliRunner().invoke(main, ["replay", str(log), "--explain", EXPLAIN_BINDING])
    assert explained.exit_code == 0, explained.output
    assert "SetBindingPlacement" in explained.output
    assert "rescheduling away from member1,member2" in explained.output  # the move, with its reason
    claim = CliRunner().invoke(main, ["replay", str(log), "--explain", EXPLAIN_CLAIM])
    assert claim.exit_code == 0, claim.output
    assert "DataSourceBound" in claim.output
    tail = CliRunner().invoke(main, ["log", "tail", str(log)])
    assert tail.exit_code == 0 and "SetBindingPlacement" in tail.output
    assert (tmp_path / "demo.db").stat().st_size > 0
