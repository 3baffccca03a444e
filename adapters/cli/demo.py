"""``tether demo``: the command; the sandbox world it runs is :mod:`tether.adapters.sandbox.demo`.

This is the one product module that imports from ``adapters/sandbox/`` (a test enforces it): the demo is the
sandbox's reason to ship with tether.
"""

from __future__ import annotations

import asyncio
import sys

import click

from tether.adapters.cli.run import configure_logging
from tether.adapters.sandbox.demo import DemoFailed, run_demo


@click.command("demo")
@click.option("--log", "log_path", default="tether-demo.db", show_default=True, type=click.Path(dir_okay=False),
              help="SQLite file for the event log (overwritten on each run).")
@click.option("--live/--no-live", default=True, show_default=True,
              help="Refresh a live table (only on a terminal; otherwise snapshots are printed).")
@click.option("--speed", default=1.0, show_default=True, type=float,
              help="Divide the pauses between steps by this (the work itself is not slowed down).")
@click.option("--keep-running", is_flag=True,
              help="Leave the sandbox up at the end; prints the API URL and a kubeconfig for kubectl.")
@click.option("--log-level", default="warning", show_default=True, help="Level of the daemon's own log lines.")
def demo_cmd(log_path: str, live: bool, speed: float, keep_running: bool, log_level: str) -> None:
    """Run tether end to end in a sandbox: claims bound, bindings placed, one table moved and followed."""
    configure_logging(log_level, json_logs=False)
    try:
        asyncio.run(run_demo(log_path=log_path, live=live, speed=speed, keep_running=keep_running))
    except DemoFailed as exc:
        click.echo(f"demo failed: {exc}", err=True)
        sys.exit(1)


def register(main: click.Group) -> None:
    main.add_command(demo_cmd)

