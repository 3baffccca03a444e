"""The soak script (ops/soak/soak.py) runs, sized down to seconds: it drives the whole demo world (claims, bindings,
table moves, queue changes, pod groups) against a daemon process and writes its CSV, its plot and its JSON line.
Nothing here asserts a figure (the machine's load decides those): that the script works, and reports what it
promises."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_a_short_soak_writes_its_samples_its_plot_and_its_summary(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_TEST_KUBECONFIG"}  # (the soak is emulator-only)
    done = subprocess.run([sys.executable, str(ROOT / "ops" / "soak" / "soak.py"), "--minutes", "0.34",
                           "--sample-every", "3", "--rate", "2", "--lifetime", "8", "--move-every", "5",
                           "--group-every", "3", "--group-lifetime", "6", "--out", str(tmp_path), "--heap-probe"],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "soak" and summary["unit"] == "MB"
    for key in ("value", "baseline", "ratio", "flat", "rss_anon_slope_mb_per_min", "claim_p50_ms", "claim_p99_ms",
                "move_p50_ms", "group_p50_ms", "events_lag_max"):
        assert key in summary, key
    assert summary["claim_n"] > 0 and summary["events"] > 0  # churn happened, and the daemon decided it
    with (tmp_path / "soak.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 3 and all(float(r["rss_mb"]) > 0 for r in rows)
    # the heap probe ran in the daemon's process and saw its structures (heap_probe/sitecustomize.py)
    probe = [json.loads(line) for line in (tmp_path / "heap.jsonl").read_text().splitlines()]
    assert len(probe) >= 3 and all(p["rss_anon_mb"] > 0 and p["py_blocks"] > 0 for p in probe)
    assert any("world.tombstones" in p.get("sizes", {}) and "log_tail.events.rows" in p["sizes"] for p in probe)
    assert summary["probe_sizes_end"]["world.claims"] > 0 and "probe_py_blocks_slope_per_min" in summary
    plot = Path(summary["plot"])
    assert plot.exists() and plot.suffix in (".png", ".svg") and plot.stat().st_size > 1000
