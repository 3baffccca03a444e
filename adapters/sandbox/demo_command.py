"""``tether demo``: the command; the sandbox world it runs is :mod:`tether.adapters.sandbox.demo`.

The command lives with the demo, in the sandbox: no product module imports ``adapters/sandbox/`` (a test enforces
it), and the CLI declares the command by name (``adapters/cli/__init__.py``), as it declares every command — the
demo is the sandbox's reason to ship with tether.

The demo ends with commands to run next (``tether replay tether-demo.db --explain ...``); they must work as
printed, in the shell the demo was started from. ``ops/demo.sh`` installs tether into the checkout's ``.venv``
without activating it in the user's shell, so ``tether`` may not be on that shell's PATH: :func:`runnable_tether`
then prints the absolute path of the script that is running, and how to activate its environment instead.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sys
from pathlib import Path

import click

from tether.adapters.cli import COMMANDS
from tether.adapters.cli.run import configure_logging, log_level_option
from tether.adapters.sandbox.demo import DemoFailed, run_demo


def runnable_tether() -> tuple[str, str]:
    """How to run this tether from the user's shell: ``tether`` when that is what PATH finds, else the absolute path
    of the console script next to this interpreter (a virtualenv's ``bin/``); and a note saying why, or ""."""
    script = Path(sys.executable).parent / "tether"
    found = shutil.which("tether")
    if not script.is_file() or (found is not None and Path(found).resolve() == script.resolve()):
        return "tether", ""
    activate = script.parent / "activate"
    how = f" or first run `. {shlex.quote(str(activate))}`" if activate.is_file() else ""
    return shlex.quote(str(script)), f"(tether is not on your PATH: the commands below use its full path;{how})"


@click.command("demo", short_help=COMMANDS["demo"].summary)
@click.option("--log", "log_path", default="tether-demo.db", show_default=True, type=click.Path(dir_okay=False),
              help="SQLite file for the event log (overwritten on each run).")
@click.option("--live/--no-live", default=True, show_default=True,
              help="Refresh a live table (only on a terminal; otherwise snapshots are printed).")
@click.option("--speed", default=1.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Divide the pauses between steps by this, at least 0.1 (the work itself is not slowed down).")
@click.option("--keep-running", is_flag=True,
              help="Leave the sandbox up at the end; prints the API URL and a kubeconfig for kubectl.")
@log_level_option("warning")
def demo_cmd(log_path: str, live: bool, speed: float, keep_running: bool, log_level: str) -> None:
    """Run tether end to end in a sandbox: claims bound, bindings placed, one table moved and followed."""
    configure_logging(log_level, json_logs=False)
    command, note = runnable_tether()
    try:
        asyncio.run(run_demo(log_path=log_path, live=live, speed=speed, keep_running=keep_running, command=command,
                             command_note=note))
    except DemoFailed as exc:
        click.echo(f"demo failed: {exc}", err=True)
        sys.exit(1)
