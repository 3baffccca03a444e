"""The ``tether`` command line.

Built on click: subcommands compose (each lives in its own module and registers itself on the group, so
``tether run``, ``tether demo`` or ``tether log export`` are added without touching the others), the help is
generated from the declarations, and everything is testable in-process with ``click.testing.CliRunner``.
Output goes through rich (styled record lines, tables, progress bars), which degrades to plain text when the
output is not a terminal.

Adding a command: write a module with ``def register(main: click.Group) -> None`` that calls
``main.add_command(...)`` (or ``log_group(main).add_command(...)`` for a ``tether log ...`` subcommand), and
append the module's name to :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import importlib

import click

#: Modules whose ``register(main)`` adds their subcommands, in help order.
COMMAND_MODULES: tuple[str, ...] = (
    "tether.adapters.cli.log",
    "tether.adapters.cli.log_transfer",
    "tether.adapters.cli.replay",
    "tether.adapters.cli.run",
    "tether.adapters.cli.demo",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tether")
def main() -> None:
    """tether: ties compute to its data and topology on multi-cluster Kubernetes (Karmada / Volcano Global).

    LOG arguments are log URLs: sqlite:///path/tether.db (or a plain file path), kafka://broker:9092/...
    """


@main.group("log")
def log_cmd() -> None:
    """Inspect, export and import the event log."""


def log_group(group: click.Group) -> click.Group:
    """The ``tether log`` subgroup of ``group`` (for modules adding ``tether log <something>``)."""
    sub = group.commands["log"]
    assert isinstance(sub, click.Group)
    return sub


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(main)


if __name__ == "__main__":
    main()
