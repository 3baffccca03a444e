"""Subcommands are imported only when used (adapters/cli/lazy.py): ``tether replay`` and ``tether log`` start
without the daemon's Kubernetes client or the sandbox, and every declared subcommand still loads, runs and is
listed by the help."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tether.adapters.cli import COMMANDS, LOG_COMMANDS, main
from tether.adapters.cli.lazy import LazyGroup, load_command
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.synthetic_log import Simulation, scenario

ROOT = Path(__file__).resolve().parents[2]
#: What only ``tether run`` and ``tether demo`` need: importing any of it costs the others a second or more.
HEAVY = ("kubernetes_asyncio", "aiohttp", "aiokafka", "tether.adapters.daemon", "tether.adapters.sandbox",
         "tether.adapters.kubernetes")


@pytest.mark.parametrize(("group", "declared"), [((), COMMANDS), (("log",), LOG_COMMANDS)])
def test_every_declared_subcommand_loads_under_its_name_and_is_listed(group: tuple[str, ...],
                                                                        declared: dict[str, str]) -> None:
    for name, where in declared.items():
        command = load_command(where)
        assert command.name == name, where
    help_text = CliRunner().invoke(main, [*group, "--help"], terminal_width=200).output
    listed = {line.split()[0] for line in help_text.split("Commands:")[1].splitlines() if line.strip()} \
        if "Commands:" in help_text else set()
    assert set(declared) <= listed, help_text
    for name, where in declared.items():  # each with the first line of its own help
        first = (load_command(where).help or "").strip().splitlines()[0]
        assert first.split()[0] in help_text, (name, first)


def test_a_declaration_that_is_not_a_command_fails_at_its_first_use() -> None:
    group = LazyGroup(name="g", lazy={"broken": "tether.adapters.cli.lazy:LazyGroup"})
    with pytest.raises(TypeError, match="not a click command"):
        group.get_command(click.Context(group), "broken")
    assert group.get_command(click.Context(group), "absent") is None


def test_an_unknown_subcommand_is_one_line() -> None:
    result = CliRunner().invoke(main, ["replya"])
    assert result.exit_code == 2
    assert "No such command 'replya'" in result.output


def _modules_after(*args: str) -> tuple[int, list[str], str]:
    """Run ``tether ARGS`` in a fresh interpreter; its exit code, the heavy modules it imported, and its output."""
    probe = ("import json, sys\n"
             "from tether.adapters.cli import main\n"
             "try:\n"
             "    main(sys.argv[1:], prog_name='tether')\n"
             "except SystemExit as exc:\n"
             "    code = exc.code\n"
             f"heavy = sorted(m for m in sys.modules if m.startswith({HEAVY!r}))\n"
             "print(json.dumps({'code': code, 'heavy': heavy}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], report["heavy"], done.stdout + done.stderr


def test_replay_and_log_tail_import_neither_the_daemon_nor_the_sandbox(tmp_path: Path) -> None:
    path = tmp_path / "t.db"

    async def write() -> None:
        log = await SqliteLog.open(path)
        await scenario(Simulation(seed=3), namespaces=1, jobs_per_namespace=2, tables=1).write(log)
        await log.close()

    asyncio.run(write())
    for args in (("replay", str(path)), ("log", "tail", str(path))):
        code, heavy, output = _modules_after(*args)
        assert code in (0, None), output
        assert heavy == [], (args, heavy)
    code, heavy, output = _modules_after("run", "--help")  # (the probe sees what a command imports)
    assert code in (0, None), output
    assert "tether.adapters.daemon" in " ".join(heavy)
