"""``tether replay``: the command — its options, and what each mode prints.

The work is in the sibling modules: :mod:`.fold` rebuilds the world, :mod:`.trail` gathers one key's decision
trail, :mod:`.diff` re-derives the recorded commands, :mod:`.whatif` re-decides under another configuration.
"""

from __future__ import annotations

import asyncio

import click
import msgspec
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from tether.adapters.cli import COMMANDS
from tether.adapters.cli.log import console, open_for_cli
from tether.adapters.log import EventLog, Snapshot
from tether.core.envelope import parse_rfc3339_ms, rfc3339
from tether.core.events import split_member_key
from tether.core.integers import decimal_digits
from tether.core.world import Settings
from tether.projections.snapshot import encode_world

from .diff import Difference, diff, print_differences
from .installation import infer_settings
from .rebuild import SNAPSHOT_NAME, ReplayResult, events_to_fold, gc_paused, replay
from .targets import Target, kind_of, resolve, suggest, workload_display
from .trail import Bounds, ScanningIndex, explain, index_of, normalise_key, print_trail
from .why import chains, workloads_of
from .why_print import print_chain

#: Kinds that are never a workload: the chain of such a key is not looked for (no fold of the log for it).
NOT_WORKLOADS = frozenset({"Cluster", "ConfigMap", "Queue", "PriorityClass", "Data", "Namespace", "Node", "*"})
CHAIN_KINDS = frozenset({"ResourceBinding", "DataSourceClaim", "DataSource"})


def parse_until(value: str | None) -> tuple[int | None, int | None]:
    """``--until``: an offset of the events stream, or an RFC3339 time → (until_offset, until_ms)."""
    if value is None:
        return None, None
    if (offset := decimal_digits(value)) is not None:
        return offset, None
    at_ms = parse_rfc3339_ms(value)
    if at_ms is None:
        raise click.BadParameter(f"{value!r} is neither an offset nor an RFC3339 time", param_hint="--until")
    return None, at_ms


def _target(typed: str, keys: set[str]) -> Target:
    """What ``typed`` names: a key of the log exactly as typed (or as ``Kind//name``), else as resolved."""
    kinds = {kind_of(k) for k in keys}
    for exact in (typed, normalise_key(typed)):
        if exact in keys:
            return msgspec.structs.replace(resolve(exact, kinds=kinds), key=exact)
    target = resolve(typed, kinds=kinds)
    if target.key not in keys and not target.namespace:  # Kind/name of a namespaced object: one namespace has it?
        same = [k for k in keys if kind_of(k) == target.kind and k.rsplit("/", 1)[-1] == target.name
                and split_member_key(k)[0] == target.cluster]
        if len(same) == 1:
            return resolve(same[0], kinds=kinds)
    return target


async def explain_command(log: EventLog, typed: str, *, bounds: Bounds, out: Console, where: str,
                          settings: Settings | None = None) -> int:
    """``--explain``: the key's decision trail when the log holds it, then the chain behind the workload it
    names (``why.py``); the nearest keys when neither exists (exit 1)."""
    index = index_of(log)
    keys = set(await index.keys("events", until_offset=bounds.until_offset)) | set(await index.keys("commands"))
    target = _target(typed, keys)
    printed = False
    if target.key in keys:
        trail = await explain(log, target.key, until_offset=bounds.until_offset, until_ms=bounds.until_ms, exact=True)
        if trail.events or trail.orphans:
            print_trail(trail, out)
            printed = True
    wants_chain = not target.cluster and target.name and target.name != "*" and (
        target.kind in CHAIN_KINDS or target.kind not in NOT_WORKLOADS)
    workloads: set[str] = set()
    if wants_chain or not printed:  # the world: the chain's links, and the workloads an unknown key may name
        with gc_paused():
            if settings is None:
                settings = await infer_settings(index, plugin_configmap=None, admission_configmap=None)
            folded = await replay(log, until_offset=bounds.until_offset, until_ms=bounds.until_ms, settings=settings)
        world = folded.world
        workloads = workloads_of(world)
        target = _target(typed, keys | {workload_display(w) for w in workloads}) if not printed else target
        found = await chains(index, world, target, bounds=bounds) if wants_chain or not printed else []
        as_of = f"{where}, up to E{folded.last_offset}" + (
            f" at {rfc3339(world.last_at_ms)}" if world.last_at_ms else "")
        for chain in found:
            if printed:
                out.print()
            print_chain(chain, out, as_of=as_of)
            printed = True
    if printed:
        return 0
    out.print(f"no record about {target.key} in {where}")
    nearest = suggest(target.key, keys | {workload_display(w) for w in workloads})
    if nearest:
        out.print("did you mean: " + ", ".join(nearest))
    return 1


def _summary_table(result: ReplayResult, log_end: int) -> Table:
    table = Table(title="World after replay", show_header=False, title_justify="left", box=None)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in result.world.summary().items():
        table.add_row(name.replace("_", " "), str(value))
    rate = result.events / result.seconds if result.seconds > 0 else 0.0
    table.add_row("replayed", f"{result.events} events in {result.seconds:.2f}s ({rate:,.0f}/s)")
    table.add_row("up to", f"offset {result.last_offset} of {log_end}")
    if result.from_snapshot is not None:
        table.add_row("from snapshot", f"offset {result.from_snapshot}")
    if result.world.last_at_ms:
        table.add_row("last event at", rfc3339(result.world.last_at_ms))
    return table


class Options(msgspec.Struct, frozen=True, kw_only=True):
    """What ``tether replay`` was asked (its command line)."""

    url: str
    until: str | None = None
    explain_key: str | None = None
    show_diff: bool = False
    use_snapshot: bool = True
    save_snapshot: bool = False
    plugin_configmap: str | None = None  # None: inferred from the log (installation.py)
    admission_configmap: str | None = None


async def run_replay(options: Options, out: Console) -> int:
    until_offset, until_ms = parse_until(options.until)
    use_snapshot = options.use_snapshot and not options.show_diff  # a snapshot is the deciders' own output: a diff
    log = await open_for_cli(options.url)                          # must re-derive from the first event
    try:
        index = index_of(log)
        settings: Settings | None = None
        indexed = not isinstance(index, ScanningIndex)
        if indexed or options.explain_key is not None or options.show_diff:  # (unindexed, Kafka: one more pass)
            settings = await infer_settings(index, plugin_configmap=options.plugin_configmap,
                                            admission_configmap=options.admission_configmap)
        elif options.plugin_configmap or options.admission_configmap:
            default = Settings()
            settings = Settings(plugin_configmap=options.plugin_configmap or default.plugin_configmap,
                                admission_configmap=options.admission_configmap or default.admission_configmap)
        if options.explain_key is not None:
            where = options.url + (f" up to {options.until}" if options.until else "")
            code = await explain_command(log, options.explain_key, out=out, where=where, settings=settings,
                                         bounds=Bounds(until_offset=until_offset, until_ms=until_ms))
            if code or not options.show_diff:
                return code
        start = 0
        if use_snapshot and until_ms is None and (snap := await log.load_snapshot(SNAPSHOT_NAME)) is not None:
            start = snap.position.get(0, 0) if until_offset is None or snap.position.get(0, 0) <= until_offset else 0
        total = await events_to_fold(log, start=start, until_offset=until_offset)
        log_end = (await log.end("events")).get(0, 0)
        with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=out, transient=True, disable=not out.is_terminal or total < 50_000) as progress:
            task = progress.add_task("replay", total=total)

            def advance(n: int) -> None:
                progress.advance(task, n)

            newer: list[Difference] = []
            retired: list[Difference] = []
            with gc_paused():
                if options.show_diff:
                    result, differences = await diff(log, until_offset=until_offset, until_ms=until_ms,
                                                     use_snapshot=use_snapshot, on_progress=advance, settings=settings,
                                                     newer=newer, retired=retired)
                else:
                    result = await replay(log, until_offset=until_offset, until_ms=until_ms, settings=settings,
                                          use_snapshot=use_snapshot, on_progress=advance)
                    differences = []
        if options.explain_key is None:
            out.print(_summary_table(result, log_end))
        dead = getattr(log, "dead_letters", None)
        if dead is not None and (letters := await dead()):
            out.print(Text(f"{len(letters)} corrupt record(s) were skipped (dead_letters table)", style="bold red"))
        if options.save_snapshot and until_offset is None and until_ms is None:
            await log.save_snapshot(Snapshot(name=SNAPSHOT_NAME, position={0: result.last_offset},
                                             state=encode_world(result.world)))
            out.print(f"saved snapshot at offset {result.last_offset}")
        if options.show_diff:
            if newer:
                out.print(Text(f"{len(newer)} decision(s) this tether makes were not recorded (Events on bindings, "
                               "timers bounding a hold for data): the log was written before tether decided them "
                               "(not a difference)", style="yellow"))
            if retired:
                out.print(Text(f"{len(retired)} recorded decision(s) this tether no longer makes or words otherwise "
                               "(claim finalizers, routine Events, the PlacementInjected message): the log was "
                               "written before (not a difference)", style="yellow"))
            print_differences(differences, out)
            kinds = {k: sum(1 for d in differences if d.kind == k) for k in ("missing", "extra", "changed")}
            if differences:
                out.print(Text("commands differ: " + ", ".join(f"{n} {k}" for k, n in kinds.items()),
                               style="bold red"))
                return 1
            out.print(Text(f"no difference: the deciders re-derive the recorded commands of {result.events} events",
                           style="bold green"))
        return 0
    finally:
        await log.close()


async def run_what_if(options: Options, candidate_path: str, out: Console) -> int:
    """Print, per recorded event, the commands the candidate configuration would add or drop, then the workloads
    that would move (exit 0; 2 when the candidate cannot be read)."""
    from .whatif import load_candidate, what_if  # keeps ``tether replay`` start-up light (yaml)

    until_offset, _ = parse_until(options.until)
    try:
        candidate = load_candidate(candidate_path)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        out.print(Text(f"cannot read {candidate_path}: {exc}", style="bold red"))
        return 2
    log = await open_for_cli(options.url)
    try:
        settings = await infer_settings(index_of(log), plugin_configmap=options.plugin_configmap,
                                        admission_configmap=options.admission_configmap)
        with gc_paused():
            answer = await what_if(log, candidate, until_offset=until_offset, settings=settings)
    finally:
        await log.close()
    for d in answer.differences:
        out.print(Text(f"event {d.event_offset} {d.event_key}", style="bold"))
        for c in d.only_recorded_config:
            out.print(Text(f"  - {type(c.command).__name__} {c.key}: {c.reason}", style="red"))
        for c in d.only_candidate_config:
            out.print(Text(f"  + {type(c.command).__name__} {c.key}: {c.reason}", style="green"))
    changed = len({c.key for d in answer.differences for c in [*d.only_recorded_config, *d.only_candidate_config]})
    out.print(Text(f"{len(answer.differences)} decision(s) differ, touching {changed} object(s)"
                   if answer.differences else "no decision differs under the candidate configuration", style="bold"))
    if answer.evictions:
        out.print()
        out.print(Text(f"Evictions under {candidate.describe()} of {candidate_path}", style="bold underline"))
        for eviction in answer.evictions:
            verb = "no longer evicted" if eviction.recorded else "evicted"
            out.print(Text(f"  event {eviction.event_offset}: {eviction.binding} {verb} for {eviction.for_binding} "
                           f"({eviction.policy}, queue {eviction.queue})", style="red" if eviction.recorded
                           else "green"))
            out.print(Text(f"      {eviction.reason}", style="dim"))
        would = sum(1 for e in answer.evictions if not e.recorded)
        out.print(Text(f"{would} eviction(s) the candidate would make, {len(answer.evictions) - would} it would not",
                       style="bold"))
    out.print()
    out.print(Text(f"Workloads that would move under {candidate.describe()} of {candidate_path}",
                   style="bold underline"))
    for move in answer.moves:
        before = ", ".join(move.before) or ("held" if move.admitted else "nowhere")
        after = "held" if move.held else ", ".join(move.after) or "nowhere (no Ready cluster is allowed)"
        out.print(Text(f"  {move.workload} ({move.binding}): {before} → {after}"))
        for why in move.why:
            out.print(Text(f"      {why}", style="dim"))
    out.print(Text(f"{len(answer.moves)} workload(s) would move" if answer.moves else "no workload would move",
                   style="bold"))
    return 0


@click.command("replay", short_help=COMMANDS["replay"].summary)
@click.argument("log_url", metavar="LOG")
@click.option("--until", metavar="OFFSET|TIME", help="Stop after this events offset or at this RFC3339 time.")
@click.option("--explain", "explain_key", metavar="KIND/NAMESPACE/NAME",
              help="Why an object is where it is: its decision trail, and for a workload (any kind, as kubectl "
                   "spells it: deploy, sts, rb, dsc…), its binding, claims, DataSource, location and mapping, with "
                   "each decision's time, cause and reason. Kind/name for cluster-scoped objects; a member "
                   "cluster's object with --cluster, or as CLUSTER:Kind/namespace/name.")
@click.option("--cluster", "member", default="", metavar="NAME",
              help="With --explain: the member cluster the object lives in (pods, PodGroups, Fluid operations).")
@click.option("--diff", "show_diff", is_flag=True,
              help="Re-run the deciders over every recorded event (never from a snapshot); exit 1 if any command "
                   "differs.")
@click.option("--snapshot/--no-snapshot", "use_snapshot", default=True, show_default=True,
              help="Start from the stored world snapshot when it covers a prefix of the range.")
@click.option("--save-snapshot", is_flag=True, help="Store the replayed world as the snapshot (whole log only).")
@click.option("--what-if", "what_if_config", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="CANDIDATE.yaml",
              help="Re-decide the history under a plugin ConfigMap, the admission ConfigMap and/or Queues; print the "
                   "decisions that would change and the workloads that would move, from where to where.")
@click.option("--plugin-configmap", default=None, metavar="NAMESPACE/NAME",
              help="The plugin ConfigMap the daemon read (tether run --plugin-configmap). Default: found in the log.")
@click.option("--admission-configmap", default=None, metavar="NAMESPACE/NAME",
              help="The admission ConfigMap the daemon read (tether run --admission-configmap). Default: found in "
                   "the log.")
def replay_cmd(log_url: str, until: str | None, explain_key: str | None, member: str, show_diff: bool,
               use_snapshot: bool, save_snapshot: bool, what_if_config: str | None, plugin_configmap: str | None,
               admission_configmap: str | None) -> None:
    """Rebuild the state from LOG and summarise it; explain why an object or workload is where it is; diff the
    deciders against the log; re-decide it under another configuration."""
    if explain_key is not None and member:
        explain_key = f"{member}:{normalise_key(explain_key)}"  # core.events.member_key
    options = Options(url=log_url, until=until, explain_key=explain_key, show_diff=show_diff,
                      use_snapshot=use_snapshot, save_snapshot=save_snapshot, plugin_configmap=plugin_configmap,
                      admission_configmap=admission_configmap)
    if what_if_config is not None:
        code = asyncio.run(run_what_if(options, what_if_config, console()))
    else:
        code = asyncio.run(run_replay(options, console()))
    click.get_current_context().exit(code)
