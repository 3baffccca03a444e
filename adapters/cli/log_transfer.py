"""``tether log export`` and ``tether log import``: copy a whole log between backends (Kafka ⇄ SQLite file).

``tether log export kafka://broker:9092/tether out.db`` reads both streams of the source log (any URL
``open_log`` takes) and appends them, in order, to a new SQLite file; ``tether log import in.db kafka://...``
does the reverse. Both show a rich progress bar per stream and copy the ``world`` snapshot when the positions it
refers to mean the same on both sides (the events stream has one partition in both, which is the default).

Offsets: the destination must be empty (the copy would otherwise renumber records). The events stream is one
ordered stream, so its offsets are kept exactly (tether's Kafka offsets start at 1 like SQLite's). A Kafka
commands topic with several partitions is exported in the deterministic merge order of ``KafkaLog.read`` and, on
import, every command goes back to the partition of its key in the same per-partition order, so a Kafka → SQLite
→ Kafka round trip into a topic with the same partition count reproduces the records exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tether.adapters.cli import LOG_COMMANDS
from tether.adapters.cli.log import console, open_for_cli
from tether.adapters.log import EventLog, Stream, aclosing_iter

STREAMS: tuple[Stream, ...] = ("events", "commands")
SNAPSHOT_NAME = "world"


def _count(end: dict[int, int]) -> int:
    """Records in a stream from its end position (offsets start at 1 and have no gaps in both backends)."""
    return sum(end.values())


async def _partitions(log: EventLog, stream: str) -> int:
    partitions = getattr(log, "partitions", None)
    return int(await partitions(stream)) if partitions is not None else 1


async def copy_log(source: EventLog, target: EventLog, *, out: Console | None = None, force: bool = False,
                   batch_size: int = 4096) -> dict[str, int]:
    """Copy every record of both streams (and the ``world`` snapshot when it stays meaningful) from ``source``
    to ``target``. Returns the number of records copied per stream."""
    if not force:
        for stream in STREAMS:
            if await target.end(stream):
                raise click.ClickException(f"the destination's {stream} stream is not empty (use --force to append)")
    totals = {stream: _count(await source.end(stream)) for stream in STREAMS}
    copied = dict.fromkeys(STREAMS, 0)
    with Progress(
        TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(), TextColumn("records"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=out or console(), transient=False,
        disable=out is None,
    ) as progress:
        for stream in STREAMS:
            task = progress.add_task(stream, total=totals[stream])
            async with aclosing_iter(source.read(stream, batch_size=batch_size)) as batches:
                async for records in batches:
                    await target.append(stream, records)
                    copied[stream] += len(records)
                    progress.update(task, advance=len(records))
    snapshot = await source.load_snapshot(SNAPSHOT_NAME)
    if snapshot is not None and await _partitions(source, "events") == await _partitions(target, "events") == 1:
        await target.save_snapshot(snapshot)
    return copied


async def _copy(source_url: str, target_url: str, force: bool, out: Console) -> dict[str, int]:
    source = await open_for_cli(source_url)
    try:
        target = await open_for_cli(target_url, existing=False)
        try:
            return await copy_log(source, target, out=out, force=force)
        finally:
            await target.close()
    finally:
        await source.close()


def _report(out: Console, copied: dict[str, int], target: str) -> None:
    out.print(f"copied {copied['events']} events and {copied['commands']} commands to {target}")


@click.command("export", short_help=LOG_COMMANDS["export"].summary)
@click.argument("source", metavar="LOG")
@click.argument("target", metavar="OUT_DB")
@click.option("--force", is_flag=True, help="Append even if OUT_DB already holds records.")
def export_cmd(source: str, target: str, force: bool) -> None:
    """Copy LOG (e.g. kafka://broker:9092/tether) into the SQLite file OUT_DB."""
    out = console()
    _report(out, asyncio.run(_copy(source, target, force, out)), target)


@click.command("import", short_help=LOG_COMMANDS["import"].summary)
@click.argument("source", metavar="IN_DB")
@click.argument("target", metavar="LOG")
@click.option("--force", is_flag=True, help="Append even if LOG already holds records.")
def import_cmd(source: str, target: str, force: bool) -> None:
    """Copy the SQLite file IN_DB (or any log URL) into LOG (e.g. kafka://broker:9092/tether)."""
    out = console()
    _report(out, asyncio.run(_copy(source, target, force, out)), target)


__all__: Sequence[str] = ("copy_log", "export_cmd", "import_cmd")
