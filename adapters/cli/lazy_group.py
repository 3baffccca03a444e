"""Subcommands imported only when they are used.

Each ``tether`` subcommand lives in its own module, and they import very different worlds: ``tether run`` the
daemon (kubernetes-asyncio's generated client, aiohttp, the webhooks), ``tether demo`` the sandbox's API emulator,
``tether replay`` the projections alone. Importing them all for every invocation made each one pay for all: two
seconds of start-up before ``tether replay`` read its first record, on a log of any size.

:class:`LazyGroup` is click's documented pattern for this (a ``click.Group`` whose ``get_command`` imports on
demand): a group declares its subcommands as ``name → Declared("module:attribute", summary)``, and only the one
invoked is imported. ``tether --help`` lists each with its declared summary, without importing any (1.5 s → 0.15 s);
each command takes that summary as its ``short_help``, so the listing is the same once a command is loaded. A
declared name whose attribute is missing or is not a click command is a bug, and fails loudly at its first use (a
test imports them all, and compares each one's short help with its declaration).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, NamedTuple

import click


class Declared(NamedTuple):
    """A subcommand declared without importing it: ``"module:attribute"`` of its click command, and the one line
    ``--help`` lists for it (the command's ``short_help``)."""

    where: str
    summary: str


class LazyGroup(click.Group):
    """A ``click.Group`` with subcommands declared as ``name → Declared`` (or a bare ``"module:attribute"``) in
    ``lazy``, imported when first looked up, besides any added the usual way; its help lists the declared summaries
    of those not imported yet."""

    def __init__(self, *args: Any, lazy: Mapping[str, Declared | str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, Declared | str] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            declared = self.lazy[cmd_name]
            self.add_command(load_command(declared if isinstance(declared, str) else declared.where), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing of the subcommands, with a declared one not imported yet standing in as a bare command
        that carries its summary (click shortens it to the terminal's width as it would the command's own)."""
        commands: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            declared = self.lazy.get(name)
            command = click.Command(name, short_help=declared.summary) \
                if isinstance(declared, Declared) and name not in self.commands else self.get_command(ctx, name)
            if command is not None and not command.hidden:
                commands.append((name, command))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in commands])


def load_command(where: str) -> click.Command:
    """The click command at ``"module:attribute"``."""
    module, _, attribute = where.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{where} is not a click command")
    return command
