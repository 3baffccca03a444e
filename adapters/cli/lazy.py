"""Subcommands imported only when they are used.

Each ``tether`` subcommand lives in its own module, and they import very different worlds: ``tether run`` the
daemon (kubernetes-asyncio's generated client, aiohttp, the webhooks), ``tether demo`` the sandbox's API emulator,
``tether replay`` the projections alone. Importing them all for every invocation made each one pay for all: two
seconds of start-up before ``tether replay`` read its first record, on a log of any size.

:class:`LazyGroup` is click's documented pattern for this (a ``click.Group`` whose ``get_command`` imports on
demand): a group declares its subcommands as ``name → "module:attribute"``, and only the one invoked is imported.
``tether --help`` still imports every subcommand, to show each one's first help line; that is the one place where
they are all needed. A declared name whose attribute is missing or is not a click command is a bug, and fails
loudly at its first use (a test imports them all).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click


class LazyGroup(click.Group):
    """A ``click.Group`` with subcommands declared as ``name → "module:attribute"`` (``lazy``), imported when first
    looked up, besides any added the usual way."""

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.add_command(load_command(self.lazy[cmd_name]), cmd_name)
        return super().get_command(ctx, cmd_name)


def load_command(where: str) -> click.Command:
    """The click command at ``"module:attribute"``."""
    module, _, attribute = where.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{where} is not a click command")
    return command
