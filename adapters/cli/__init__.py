"""The ``tether`` command line.

Built on click: subcommands compose (each lives in its own module, declared by name in :data:`COMMANDS`, so
``tether run``, ``tether demo`` or ``tether log export`` are added without touching the others), the help is
generated from the declarations, and everything is testable in-process with ``click.testing.CliRunner``.
Output goes through rich (styled record lines, tables, progress bars), which degrades to plain text when the
output is not a terminal.

Errors a user can fix are one line on stderr with exit code 2 (:mod:`tether.adapters.cli.errors`); the group's
help lists every environment variable tether reads (:data:`ENVIRONMENT`).

Adding a command: write it (a ``click.Command``) in a module of its own (in this room; ``tether demo`` lives with
the sandbox it runs), and declare it with its one-line summary in :data:`COMMANDS` (or :data:`LOG_COMMANDS` for a
``tether log ...`` subcommand); the command takes that summary as its ``short_help``. Only the subcommand invoked
is imported (:mod:`tether.adapters.cli.lazy_group`): ``tether replay`` does not load the daemon's Kubernetes client, and
``tether --help`` loads none.
"""

from __future__ import annotations

import click

from tether.adapters.cli.errors import TetherGroup
from tether.adapters.cli.lazy_group import Declared, LazyGroup

#: The subcommands of ``tether``: where each click command is (imported when it is used), and the line ``tether
#: --help`` lists for it (each command takes it as its ``short_help``).
COMMANDS: dict[str, Declared] = {
    "demo": Declared("tether.adapters.sandbox.demo_command:demo_cmd",
                     "Run tether end to end in a sandbox: claims, bindings, a table moved."),
    "replay": Declared("tether.adapters.cli.replay.command:replay_cmd",
                       "Rebuild the state from LOG: explain, diff or re-decide placements."),
    "run": Declared("tether.adapters.cli.run:run_cmd", "Run the daemon: watch, decide, apply — until SIGTERM/SIGINT."),
    "status": Declared("tether.adapters.cli.status:status_cmd",
                       "One screen on a running daemon: leader, log lag, queues, members."),
}
#: The subcommands of ``tether log``, likewise.
LOG_COMMANDS: dict[str, Declared] = {
    "export": Declared("tether.adapters.cli.log_transfer:export_cmd", "Copy LOG into the SQLite file OUT_DB."),
    "import": Declared("tether.adapters.cli.log_transfer:import_cmd",
                       "Copy the SQLite file IN_DB (or any log) into LOG."),
    "tail": Declared("tether.adapters.cli.log:tail_cmd", "Print the records of LOG, one line each."),
}

#: Every environment variable tether reads, and what for (shown by ``tether --help``; each option that reads one
#: also shows it in its own command's help).
ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("KUBECONFIG", "kubeconfig of the Karmada API server (tether run --kubeconfig; a ':'-separated list is merged)"),
    ("TETHER_LOG", "event log URL of tether run (--log)"),
    ("TETHER_PUSH_TOKEN", "bearer token of the push endpoint (tether run; or --push-token-file)"),
    ("TETHER_STATUS_URL", "the daemon tether status asks (--url)"),
    ("POD_NAME", "this replica's identity in leader election (tether run; default: host name and pid)"),
    ("POD_IP, POD_NAMESPACE", "the address the leader publishes and the namespace of the Services it publishes it "
     "for (tether run --leader-service)"),
    ("KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT", "the API server of tether run --in-cluster (set by "
     "Kubernetes in every pod)"),
)


def _environment_epilog() -> str:
    width = max(len(name) for name, _ in ENVIRONMENT if "," not in name) + 2
    lines = ["\b", "Environment variables:"]
    for name, what in ENVIRONMENT:
        lines.append(f"  {name.ljust(width)}{what}" if len(name) < width else f"  {name}\n  {' ' * width}{what}")
    return "\n".join(lines)


@click.group(name="tether", cls=TetherGroup, lazy=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"]}, epilog=_environment_epilog())
@click.version_option(package_name="tether")
def main() -> None:
    """tether: ties compute to its data and topology on multi-cluster Kubernetes (Karmada / Volcano Global).

    LOG arguments are log URLs: sqlite:///path/tether.db (or a plain file path), kafka://broker:9092/...
    """


@main.group("log", cls=LazyGroup, lazy=LOG_COMMANDS)
def log_cmd() -> None:
    """Inspect, export and import the event log."""


if __name__ == "__main__":
    main()
