"""Subcommands are imported only when used (adapters/cli/lazy_group.py): ``tether replay`` and ``tether log`` start
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
from tether.adapters.cli.lazy_group import Declared, LazyGroup, load_command
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.synthetic_log import Simulation, scenario

ROOT = Path(__file__).resolve().parents[2]
#: What only ``tether run`` and ``tether demo`` need: importing any of it costs the others a second or more.
HEAVY = ("kubernetes_asyncio", "aiohttp", "aiokafka", "tether.adapters.daemon", "tether.adapters.sandbox",
         "tether.adapters.kubernetes")


@pytest.mark.parametrize(("group", "declared"), [((), COMMANDS), (("log",), LOG_COMMANDS)])
def test_every_declared_subcommand_loads_under_its_name_and_is_listed_with_its_summary(
        group: tuple[str, ...], declared: dict[str, Declared]) -> None:
    """The help lists each declared summary before any command is imported, and each command, once imported, has
    that summary as its short help: the listing is the same either way."""
    def listing() -> dict[str, str]:
        help_text = CliRunner().invoke(main, [*group, "--help"], terminal_width=200).output
        return {line.split()[0]: line.split(None, 1)[1].strip()
                for line in help_text.split("Commands:")[1].split("\n\n")[0].splitlines() if line.strip()}

    before = listing()
    for name, (where, summary) in declared.items():
        command = load_command(where)
        assert command.name == name, where
        assert command.short_help == summary, where
        assert before[name] == summary
    after = listing()
    assert after == before


def test_the_help_imports_no_subcommand() -> None:
    """``tether --help`` lists every subcommand from its declaration (0.1 s, against 1.5 s importing them all)."""
    code, imported, output = _modules_after("--help", modules=tuple(d.where.partition(":")[0]
                                                                      for d in COMMANDS.values()))
    assert code in (0, None), output
    assert "replay" in output and "Rebuild the state from LOG" in output
    assert imported == [], imported


def test_a_declaration_that_is_not_a_command_fails_at_its_first_use() -> None:
    group = LazyGroup(name="g", lazy={"broken": "tether.adapters.cli.lazy_group:LazyGroup"})
    with pytest.raises(TypeError, match="not a click command"):
        group.get_command(click.Context(group), "broken")
    assert group.get_command(click.Context(group), "absent") is None


def test_an_unknown_subcommand_is_one_line() -> None:
    result = CliRunner().invoke(main, ["replya"])
    assert result.exit_code == 2
    assert "No such command 'replya'" in result.output


def _modules_after(*args: str, modules: tuple[str, ...] = HEAVY) -> tuple[int, list[str], str]:
    """Run ``tether ARGS`` in a fresh interpreter; its exit code, which of ``modules`` (the heavy ones by default)
    it imported, and its output."""
    probe = ("import json, sys\n"
             "from tether.adapters.cli import main\n"
             "try:\n"
             "    main(sys.argv[1:], prog_name='tether')\n"
             "except SystemExit as exc:\n"
             "    code = exc.code\n"
             f"heavy = sorted(m for m in sys.modules if m.startswith({modules!r}))\n"
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
