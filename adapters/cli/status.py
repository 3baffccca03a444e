"""``tether status``: one screen on a running daemon, from its ``GET /status`` (``adapters/daemon/status.py``).

The daemon is asked over HTTP — the port of ``tether run --http-port`` (8080), where ``/metrics`` is — so the
command works wherever that port is reachable (``kubectl port-forward`` to a pod included) and needs neither the
log nor the kubeconfig. A plain synchronous request (urllib): one GET, nothing to overlap.

The screen, top to bottom: who leads and whether this replica is ready; the log's end and each consumer's lag; what
the world tracks; the admission queues with their held and admitted bindings; the members; watches that are not
well; the last decisions and the recent errors — a plugin ConfigMap entry refused first among them, for as long
as it is. ``--json`` prints the document as served, for scripts.

A daemon that does not answer, or an address that is not a tether daemon, is a one-line error (exit code 2).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import click
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from tether.adapters.cli import COMMANDS
from tether.adapters.cli.errors import UserError

DEFAULT_URL = "http://127.0.0.1:8080"


def fetch_status(url: str, *, timeout: float = 5.0) -> dict[str, Any]:
    """The status document of the daemon at ``url`` (its base URL), or a :class:`UserError` saying why not."""
    target = url.rstrip("/") + "/status"
    hint = "is tether run serving there? (its port is --http-port, 8080 by default)"
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--url {url}: expected http://HOST:PORT (the daemon's --http-port)")
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise UserError(f"{target} answered {exc.code} {exc.reason}: {hint}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(f"no tether daemon answers at {url} ({reason}): {hint}") from exc
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise UserError(f"{target} did not answer JSON: {hint}") from exc
    if not isinstance(document, dict) or "daemon" not in document:
        raise UserError(f"{target} did not answer a tether status: {hint}")
    return document


def _duration(seconds: float) -> str:
    rest = int(seconds)
    days, rest = divmod(rest, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, rest = divmod(rest, 60)
    return (f"{days}d{hours:02d}h" if days else f"{hours}h{minutes:02d}m" if hours
            else f"{minutes}m{rest:02d}s" if minutes else f"{rest}s")


def _offsets(by_partition: dict[str, int]) -> str:
    if len(by_partition) <= 1:
        return str(next(iter(by_partition.values()), 0))
    return f"{sum(by_partition.values())} ({len(by_partition)} partitions)"


#: Rows of the last decisions and recent errors on the screen (the document has more: ``--json``).
SHOWN_DECISIONS = 8
SHOWN_ERRORS = 5


def _table(title: str, *columns: str, clip_last: bool = False) -> Table:
    """A table. With ``clip_last`` a row is one line, so that the screen stays one screen: every column but the
    last keeps its width (no wrap), and the last one (a reason, a message: pass it through :func:`_clipped`) takes
    what is left and is cut with an ellipsis."""
    table = Table(title=title, title_justify="left", title_style="bold", expand=False, show_edge=False, pad_edge=False)
    for i, column in enumerate(columns):
        table.add_column(column, overflow="fold", no_wrap=clip_last and i < len(columns) - 1)
    return table


def _clipped(text: str, style: str = "") -> Text:
    """A cell cut to one line (the column may still be narrowed: the text, not the column, refuses to wrap)."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def _more(shown: int, kept: int) -> str | None:
    return f"the last {shown} of {kept} kept (tether status --json shows them all)" if kept > shown else None


def _header(doc: dict[str, Any], url: str) -> Text:
    daemon, leader = doc["daemon"], doc["leader"]
    text = Text(f"tether {daemon.get('version', '')} at {url}", style="bold")
    text.append("  ·  ")
    if leader.get("leading"):
        text.append("leader", style="green")
        text.append(" (no election)" if not leader.get("election") else f" of {leader.get('lease')}")
    else:
        text.append("standby", style="yellow")
        text.append(f"; leader: {leader.get('holder') or 'none yet'}")
    text.append(f"  ·  {daemon.get('identity')}  ·  ")
    text.append("ready" if daemon.get("ready") else f"not ready: {daemon.get('ready_reason')}",
                style="green" if daemon.get("ready") else "red")
    text.append(f"  ·  up {_duration(float(daemon.get('uptime_seconds') or 0))}")
    text.append(f"\nlog {(doc.get('log') or {}).get('url', '')}", style="dim")
    return text


def _log_table(doc: dict[str, Any]) -> Table:
    section = doc.get("log") or {}
    table = _table("log", "stream", "end", "consumer", "position", "lag")
    for stream, row in (section.get("streams") or {}).items():
        lag = int(row.get("lag") or 0)
        table.add_row(stream, _offsets(row.get("end") or {}), row.get("consumer", ""),
                      _offsets(row.get("position") or {}), Text(str(lag), style="yellow" if lag else "green"))
    if section.get("error"):
        table.caption = f"could not read the log: {section['error']}"
    return table


def _world_table(doc: dict[str, Any]) -> Group | Text:
    world = doc.get("world")
    if world is None:
        return Text("tracked: nothing (the world is not recovered yet, or this replica is a standby)", style="yellow")
    line = Text()
    items = [("claims", f"{world['claims']} ({world['claims_bound']} bound, {world['claims_pending']} pending)"),
             ("DataSources", str(world["data_sources"])),
             ("bindings", f"{world['bindings']} ({world['bindings_injected']} placed by tether)"),
             ("clusters", str(world["clusters"])), ("lookups in flight", str(world["lookups_in_flight"])),
             ("commands in flight", str(world["commands_in_flight"])), ("timers", str(world["timers"])),
             ("lists pending", ", ".join(world.get("lists_pending") or []) or "0")]
    for i, (name, value) in enumerate(items):
        line.append("  ·  " if i else "")
        line.append(f"{name} ")
        line.append(value, style="bold")
    parts: list[Any] = [Text("tracked", style="bold"), line]
    if world.get("lookups"):
        parts.append(Text("looking up: " + ", ".join(world["lookups"]), style="dim"))
    return Group(*parts)


def _names(names: list[str], count: int) -> str:
    more = count - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "") if names else "-"


def _admission_table(doc: dict[str, Any]) -> Group | None:
    section = doc.get("admission") or {}
    if not section.get("enabled"):
        return None
    parts: list[Any] = []
    if section.get("config_error"):
        parts.append(Text(f"admission ConfigMap {section.get('configmap')} refused (the previous configuration "
                          f"stays in force): {section['config_error']}", style="red"))
    table = _table(f"admission queues ({section.get('configmap')})", "queue", "state", "weight", "allocated",
                   "preemption", "held", "admitted")
    for queue in section.get("queues") or []:
        state = "open" if queue.get("open") else ("closed" if queue.get("open") is False else queue.get("problem"))
        held, admitted = queue.get("held_count", 0), queue.get("admitted_count", 0)
        allocated = ",".join(f"{k}={v}" for k, v in (queue.get("allocated") or {}).items()) or "-"
        policy = queue.get("policy") or {}
        preemption = ", ".join(f"{k} {v}" for k, v in policy.items() if v != "Never") or "-"
        table.add_row(queue["name"], state or "", str(queue.get("weight") or "-"), allocated, preemption,
                      f"{held}: {_names(queue.get('held') or [], held)}",
                      f"{admitted}: {_names(queue.get('admitted') or [], admitted)}")
    if not section.get("queues"):
        table.caption = "no queue yet"
    parts.append(table)
    if section.get("checks"):
        line = Text("admission checks", style="bold")
        line.append("  " + "  ·  ".join(f"{queue}: {', '.join(names)}" for queue, names in section["checks"].items()))
        if section.get("check_states"):
            line.append("  —  " + ", ".join(f"{k} {n}" for k, n in section["check_states"].items()))
        parts.append(line)
    return Group(*parts)


def _locality_table(doc: dict[str, Any]) -> Group | None:
    section = doc.get("locality") or {}
    problems, count = section.get("problems") or [], int(section.get("bindings_count") or 0)
    if not problems and not count:
        return None
    parts: list[Any] = [Text(f"locality setting refused: {p}", style="red") for p in problems]
    if count:
        tiers = section.get("tiers") or {}
        line = Text("locality tiers", style="bold")
        line.append("  " + "  ·  ".join(f"{tier} {n}" for tier, n in tiers.items()))
        parts.append(line)
        parts += [Text(f"  {row}") for row in section.get("bindings") or []]
        if count > len(section.get("bindings") or []):
            parts.append(Text(f"  and {count - len(section['bindings'])} more", style="dim"))
    return Group(*parts)


def _members_table(doc: dict[str, Any]) -> Table | None:
    members = doc.get("members") or []
    if not members:
        return None
    table = _table("members", "cluster", "Karmada", "connected", "listing", "nodes", "pods", "not served",
                   "watch errors")
    for m in members:
        ready = m.get("karmada_ready")
        table.add_row(m["name"], Text("Ready" if ready else ("NotReady" if ready is False else "-"),
                                      style="green" if ready else "red" if ready is False else ""),
                      m.get("origin") or "no", ", ".join(m.get("listing") or []) or "-",
                      str(m.get("nodes", 0)) if m.get("connected") else "-",
                      str(m.get("pods", 0)) if m.get("connected") else "-",
                      ", ".join(m.get("absent") or []) or "-",
                      f"{m.get('watch_errors', 0)}" + (f" ({m['last_error']})" if m.get("last_error") else ""))
    return table


def _watches_table(doc: dict[str, Any]) -> Table | None:
    unwell = [w for w in doc.get("watches") or [] if not w.get("synced") or w.get("errors") or w.get("absent")]
    if not unwell:
        return None
    table = _table("watches not well", "resource", "listed", "errors", "last error")
    for w in unwell:
        table.add_row(w["resource"], "absent" if w.get("absent") else ("yes" if w.get("synced") else "not yet"),
                      str(w.get("errors", 0)), w.get("last_error") or "-")
    return table


def _clock(at: str) -> str:
    """``2026-01-02T03:04:05Z`` → ``03:04:05`` (the screen is about now; ``--json`` has the full time)."""
    return at[11:19] if len(at) >= 19 and at[10] == "T" else at


def _without_key(reason: str, key: str) -> str:
    """A reason without the object it begins with (``claim DataSourceClaim/ns/n: Bound...``): the row names it."""
    at = reason.find(key) if key else -1
    return reason[at + len(key):].lstrip(": ") or reason if 0 <= at <= 16 else reason


def _decisions_table(doc: dict[str, Any]) -> Table:
    decisions = doc.get("decisions") or []
    table = _table("last decisions", "time", "decision", "object", "reason", clip_last=True)
    for d in decisions[:SHOWN_DECISIONS]:
        key = d.get("key", "")
        table.add_row(_clock(d.get("at", "")), d.get("command", ""), key, _clipped(_without_key(d.get("reason", ""),
                                                                                                key)))
    table.caption = _more(SHOWN_DECISIONS, len(decisions)) if decisions else "none since the start"
    return table


def _errors_table(doc: dict[str, Any]) -> Table:
    errors = doc.get("errors") or []
    table = _table("recent errors", "time", "source", "object", "what", "reason", clip_last=True)
    plugins = doc.get("plugins") or {}
    refused = plugins.get("refused") or {}
    for system, error in refused.items():  # a state, not an event: first, for as long as it lasts
        table.add_row("now", "config", f"plugin {system}", "PluginConfigInvalid",
                      _clipped(f"{plugins.get('configmap', '')}: {error}", style="red"))
    for e in errors[:SHOWN_ERRORS]:
        table.add_row(_clock(e.get("at", "")), e.get("source", ""), e.get("key", ""), e.get("what", ""),
                      _clipped(f"{e.get('reason', '')}: {e.get('message', '')}", style="red"))
    table.caption = _more(SHOWN_ERRORS, len(errors)) if errors else None if refused else "none since the start"
    return table


def render_status(doc: dict[str, Any], *, url: str) -> Group:
    """The screen of ``tether status`` (module doc)."""
    parts: list[Any] = [_header(doc, url), Text(""), _log_table(doc), Text(""), _world_table(doc)]
    for optional in (_admission_table(doc), _locality_table(doc), _members_table(doc), _watches_table(doc)):
        if optional is not None:
            parts += [Text(""), optional]
    parts += [Text(""), _decisions_table(doc), Text(""), _errors_table(doc)]
    return Group(*parts)


@click.command("status", short_help=COMMANDS["status"].summary)
@click.option("--url", default=DEFAULT_URL, show_default=True, envvar="TETHER_STATUS_URL", show_envvar=True,
              help="The daemon's HTTP address (tether run --http-port), e.g. through kubectl port-forward.")
@click.option("--json", "as_json", is_flag=True, help="Print the status document (JSON) as the daemon serves it.")
@click.option("--timeout", default=5.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds to wait for the answer.")
def status_cmd(url: str, as_json: bool, timeout: float) -> None:
    """One screen on a running daemon: leader, log lag, objects tracked, admission queues, members, the last
    decisions and errors."""
    document = fetch_status(url, timeout=timeout)
    if as_json:
        click.echo(json.dumps(document, indent=2, sort_keys=True))
        return
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    console.print(render_status(document, url=url))
    console.print(Text(f"as of {time.strftime('%Y-%m-%d %H:%M:%S')}", style="dim"))
