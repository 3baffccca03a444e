"""``tether log tail``: print the records of a log, one line each (or JSON lines), optionally following it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Literal

import click
from rich.console import Console

from tether.adapters.cli import LOG_COMMANDS
from tether.adapters.cli.errors import UserError
from tether.adapters.cli.record_lines import line
from tether.adapters.log import EventLog, Position, Record, Stream, aclosing_iter
from tether.adapters.log.url import LogUnreachable, LogUnusable, is_sqlite, open_log, sqlite_path
from tether.core.envelope import EventRecord, encode

StreamChoice = Literal["events", "commands", "both"]


def console() -> Console:
    """The console of CLI output: never wraps a record line, plain when not a terminal."""
    return Console(soft_wrap=True, highlight=False)


async def open_for_cli(url: str, *, existing: bool = True) -> EventLog:
    """``open_log`` with its refusals (bad URL, unknown scheme or option) shown as a usage error, and a log whose
    servers do not answer or whose file cannot be a log (a directory, not a database) as a one-line error
    (``errors.UserError``), both exit code 2. With ``existing``, a
    SQLite log must already exist: opening creates the file, and a mistyped path would otherwise replay an empty
    log that was never there."""
    try:
        if existing:
            _require_file(url)
        return await open_log(url, connect=True)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="LOG") from exc
    except LogUnreachable as exc:
        raise UserError(str(exc)) from exc
    except LogUnusable as exc:
        raise UserError(str(exc)) from exc


def _require_file(url: str) -> None:
    if is_sqlite(url):
        path = Path(sqlite_path(url)[0])
        if not path.exists():
            raise ValueError(f"no log at {path} (a tether log is the SQLite file of `tether run --log`)")


def _streams(choice: str) -> Sequence[Stream]:
    return ("events", "commands") if choice == "both" else (choice,)  # type: ignore[return-value]


def _sort_key(record: Record) -> tuple[int, int, int]:
    return (record.at_ms, 0 if isinstance(record, EventRecord) else 1, record.offset)


async def merged(log: EventLog, streams: Sequence[Stream], after: dict[Stream, Position],
                 until: dict[Stream, Position]) -> AsyncIterator[Record]:
    """Records of several streams up to ``until``, merged by time (events first on ties), lazily."""
    # ``until_offset`` bounds one partition's offsets; with several partitions (Kafka commands), ``read`` itself
    # stops at the end as of the call, which is the bound wanted here.
    iters = {s: aiter(log.read(s, after=after.get(s), until_offset=until[s].get(0, 0) if len(until[s]) <= 1
                                else None)) for s in streams}
    buffers: dict[Stream, list[Record]] = {s: [] for s in streams}
    heads: dict[Stream, int] = {s: 0 for s in streams}

    async def head(s: Stream) -> Record | None:
        if heads[s] >= len(buffers[s]):
            try:
                buffers[s], heads[s] = list(await anext(iters[s])), 0
            except StopAsyncIteration:
                return None
        return buffers[s][heads[s]]

    try:
        while True:
            candidates = [(r, s) for s in streams if (r := await head(s)) is not None]
            if not candidates:
                return
            record, stream = min(candidates, key=lambda c: _sort_key(c[0]))
            heads[stream] += 1
            yield record
    finally:
        for iterator in iters.values():
            close = getattr(iterator, "aclose", None)
            if close is not None:
                await close()


def _emit(out: Console, record: Record, as_json: bool) -> None:
    if as_json:
        stream = b"events" if isinstance(record, EventRecord) else b"commands"
        sys.stdout.write((b'{"stream":"' + stream + b'",' + encode(record)[1:]).decode() + "\n")
        sys.stdout.flush()
    else:
        out.print(line(record))


async def _follow(log: EventLog, stream: Stream, after: Position, out: Console, as_json: bool) -> None:
    follow = getattr(log, "follow", None)
    if follow is not None:  # SqliteLog: follow from any position without a consumer
        batches = follow(stream, after=after)
    else:  # other backends: an uncommitted consumer of our own
        batches = log.consume(stream, consumer=f"tether-log-tail-{id(out)}", follow=True)
    async with aclosing_iter(batches):
        async for batch in batches:
            for record in batch.records:
                if record.offset > after.get(record.partition, 0):
                    _emit(out, record, as_json)


async def tail(url: str, stream: StreamChoice, follow: bool, start: int, as_json: bool, out: Console) -> None:
    log = await open_for_cli(url)
    try:
        streams = _streams(stream)
        after: dict[Stream, Position] = {s: {0: start - 1} for s in streams} if start > 0 else {}
        until = {s: await log.end(s) for s in streams}
        async with aclosing_iter(merged(log, streams, after, until)) as records:
            async for record in records:
                _emit(out, record, as_json)
        if follow:
            ends = {s: {p: max(o, after.get(s, {}).get(p, 0)) for p, o in (until[s] or {0: 0}).items()}
                    for s in streams}
            await asyncio.gather(*(_follow(log, s, ends[s], out, as_json) for s in streams))
    finally:
        await log.close()


@click.command("tail", short_help=LOG_COMMANDS["tail"].summary)
@click.argument("log_url", metavar="LOG")
@click.option("--stream", "stream", type=click.Choice(["events", "commands", "both"]), default="both",
              show_default=True, help="Which stream to print (both: merged by time).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing records as they are appended.")
@click.option("--from", "start", type=click.IntRange(min=0), default=0, metavar="OFFSET",
              help="Start at this offset (of each stream).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (the stored record + stream).")
def tail_cmd(log_url: str, stream: StreamChoice, follow: bool, start: int, as_json: bool) -> None:
    """Print the records of LOG: offset, time, source/decider, key, type, summary, causation."""
    with suppress(KeyboardInterrupt):
        asyncio.run(tail(log_url, stream, follow, start, as_json, console()))
