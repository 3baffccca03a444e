"""Write a small log (SQLite) with the tether found on ``sys.path``: the fixtures of ``tests/log/test_old_logs.py``.

Run it with the tree of the version whose records the fixture should hold (an old commit: ``git archive COMMIT |
tar -x -C DIR``, then ``PYTHONPATH=DIR python generate.py OUT.db``; the current one: ``python generate.py
OUT.db``). Module paths moved over time (``adapters/synthetic_log.py`` became ``adapters/testing/synthetic_log.py``,
``adapters/sqlite_log.py`` became ``adapters/log/sqlite.py``), so each import tries the places it has lived.

The log is the synthetic platform's day of ``adapters/testing/synthetic_log.py`` (claims, bindings, clusters, a
table move, deleted claims) with a snapshot of the world at its end, written by that version's own encoders.
Beside it, ``OUT.json`` records what that version knew: its commit (when given), its schema and snapshot versions
and the world's summary as its own fold computed it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path
from typing import Any


def _first(*modules: str) -> Any:
    for name in modules:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {modules}")


async def main(out: Path, commit: str) -> None:
    synthetic = _first("tether.adapters.testing.synthetic_log", "tether.adapters.synthetic_log")
    sqlite = _first("tether.adapters.log.sqlite", "tether.adapters.sqlite_log")
    log_mod = _first("tether.adapters.log", "tether.adapters.log")
    snapshot = importlib.import_module("tether.projections.snapshot")
    events = importlib.import_module("tether.core.events")
    envelope = importlib.import_module("tether.core.envelope")

    sim = synthetic.scenario(synthetic.Simulation(seed=23, clusters=4), namespaces=2, jobs_per_namespace=2,
                             tables=3, migrations=1, deletions=0.4)
    log = await sqlite.SqliteLog.open(str(out))
    try:
        await sim.write(log)
        last = sim.events[-1].offset
        await log.save_snapshot(log_mod.Snapshot(name="world", position={0: last},
                                                 state=snapshot.encode_world(sim.world), at_ms=sim.events[-1].at_ms))
    finally:
        await log.close()
    import sqlite3

    with sqlite3.connect(out) as db:  # (the file goes into git: no free pages)
        db.execute("VACUUM")
    meta = {"commit": commit, "event_schema": events.EVENT_SCHEMA_VERSION,
            "command_schema": envelope.COMMAND_SCHEMA_VERSION, "snapshot_version": snapshot.SNAPSHOT_VERSION,
            "events": len(sim.events), "commands": len(sim.commands), "summary": sim.world.summary()}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    Path(sys.argv[1]).unlink(missing_ok=True)
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else ""))
