"""One-line errors: what is wrong and what to do about it, on one line of stderr, exit code 2.

Every failure a user can fix — a flag with a bad value, a kubeconfig that is missing or is not YAML, a log URL
whose port is not a number, a Kafka broker that does not answer, an API server without tether's CRDs — ends the
command with one line, ``<command>: <what is wrong>: <what to do>``, and exit code 2 (click's code for usage
errors, so "2" means "fix the invocation or its environment" for every tether command). No traceback: the line
is the whole message, and it names the flag, file or server to fix.

A bug is not a user error: an unexpected exception keeps its traceback and exit code 1, so that it can be
reported. Long-running failures (``tether demo`` timing out, a daemon losing its Lease) keep their own codes.

How it is done: :class:`TetherGroup` runs click in non-standalone mode, so that every :class:`click.ClickException`
(usage errors included, which click would print as usage + hint + message on four lines) reaches one formatter,
:func:`one_line`. Commands raise :class:`UserError` for what they detect themselves.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click
from click.utils import _detect_program_name

from tether.adapters.cli.lazy_group import LazyGroup

#: The exit code of every user error (click's ``UsageError`` code).
USER_ERROR = 2


class UserError(click.ClickException):
    """A failure the user can fix; its message says what to fix. Remembers the command it happened in."""

    exit_code = USER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        ctx = click.get_current_context(silent=True)
        self.command_path = ctx.command_path if ctx is not None else ""


def _flatten(text: str) -> str:
    """One line: newlines and runs of blanks become single spaces (YAML marks, wrapped API messages)."""
    return " ".join(text.split())


def one_line(exc: click.ClickException, *, default_command: str = "tether") -> str:
    """The line shown for ``exc``: ``<command>: <message>``, plus where the help is for a usage error."""
    ctx = getattr(exc, "ctx", None)
    command = getattr(exc, "command_path", "") or (ctx.command_path if ctx is not None else "") or default_command
    message = _flatten(exc.format_message())
    if isinstance(exc, click.UsageError) and ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    return f"{command}: {message}"


def fail(message: str) -> NoReturn:
    """Raise the :class:`UserError` ``message`` (for use in expressions and callbacks)."""
    raise UserError(message)


class TetherGroup(LazyGroup):
    """The ``tether`` group: click in non-standalone mode, with one-line errors (module doc); its subcommands are
    imported when used (:mod:`tether.adapters.cli.lazy_group`)."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:  # an embedding caller handles the exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        prog_name = prog_name or _detect_program_name()
        try:
            result = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            click.echo(one_line(exc, default_command=self._command_path(argv, prog_name)), err=True)
            sys.exit(USER_ERROR if exc.exit_code in (1, USER_ERROR) else exc.exit_code)
        sys.exit(result if isinstance(result, int) else 0)

    def _command_path(self, argv: list[str], prog_name: str) -> str:
        """``tether log tail`` from the arguments, for the errors click raises without a context (an option missing
        its value is found by the parser, before the command's context exists)."""
        path: list[str] = [prog_name]
        command: click.Command = self
        ctx = click.Context(self, info_name=prog_name)
        for arg in argv:
            sub = command.get_command(ctx, arg) if isinstance(command, click.Group) else None
            if sub is None:
                break
            path.append(arg)
            command = sub
        return " ".join(path)
