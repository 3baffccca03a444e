"""Mutation-test every module of ``ops/mutants.plan`` against its own tests; a table per module and one score.

    python ops/mutants_all.py [--sample N --seed S] [--record FILE] [--timeout S] [MODULE ...]
    python ops/mutants_all.py --table FILE          # the table of a record, again
    python ops/mutants_all.py --survivors FILE --record FILE   # only the survivors of a record, again
    python ops/mutants_all.py --sample 10 --seed S --extend FILE --record FILE   # more of the same draw

The plan names, for each module, the fastest tests that claim to cover it (unit tests where there are any, the
integration tests only where a module has none), so that a whole tree fits in an evening on a shared machine: a
mutant the integration tests would catch and the unit tests do not is a gap in the unit tests, which is what a
survivor is for. ``--sample N`` runs N mutants per module, drawn from one seed (printed), the same N for the same
seed; the table says how many of each module's mutants ran. Each module's result is appended to the record (JSON
lines) as it finishes, so a long run can be stopped and resumed (``--resume`` skips the modules it holds).
``--survivors`` runs again only the mutants a record says survived (after tests were added for them) and appends
what it finds to the record as a re-run: the table counts the mutants it now kills as killed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import mutants  # (the sibling script, not a package)

PLAN = Path(__file__).with_name("mutants.plan")


def plan(path: Path) -> dict[Path, list[str]]:
    """``module  pytest-args…`` per line; ``#`` starts a comment."""
    out = {}
    for line in path.read_text().splitlines():
        words = line.split("#")[0].split()
        if words:
            out[Path(words[0])] = words[1:]
    return out


def merged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per module: a re-run of a module's survivors counts those it killed and keeps its survivors
    (``first``: what the first run killed)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        base = out.get(row["module"])
        if row.get("rerun") and base is not None:
            base.update(killed=base["killed"] + row["killed"], survivors=row["survivors"])
        elif row.get("extends") and base is not None:  # more of the module's mutants: counted in, as first run
            base.update(killed=base["killed"] + row["killed"], first=base["first"] + row["killed"],
                        ran=base["ran"] + row["ran"], sample=row["sample"],
                        survivors=base["survivors"] + row["survivors"])
        else:
            out[row["module"]] = dict(row, first=row["killed"])
    return list(out.values())


def read(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per module the mutants that ran (of all), killed by the first run and now, the score now."""
    lines = [f"| {'module':<42} | ran | of  | first | now | score |", f"|{'-' * 44}|----:|----:|------:|----:|------:|"]
    first = killed = ran = found = 0
    for row in rows:
        k, r, f, k1 = int(row["killed"]), int(row["ran"]), int(row["found"]), int(row.get("first", row["killed"]))
        first, killed, ran, found = first + k1, killed + k, ran + r, found + f
        lines.append(f"| {row['module']!s:<42} | {r:>3} | {f:>3} | {k1:>5} | {k:>3} | {100 * k / max(1, r):>4.0f}% |")
    lines.append(f"| {'total':<42} | {ran:>3} | {found:>3} | {first:>5} | {killed:>3} | "
                 f"{100 * killed / max(1, ran):>4.0f}% |")
    lines.append(f"\n{ran} of {found} mutants ran ({100 * ran / max(1, found):.1f}%); the first run killed {first} "
                 f"({100 * first / max(1, ran):.1f}%), {killed} are killed now ({100 * killed / max(1, ran):.1f}%)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", type=Path, help="only these modules of the plan")
    parser.add_argument("--plan", type=Path, default=PLAN)
    parser.add_argument("--sample", type=int, help="this many mutants per module (deterministic: --seed)")
    parser.add_argument("--seed", type=int, help="the samples' seed (printed; random when not given)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds per test run at most, and 4 times the unmutated run (a hang is a kill)")
    parser.add_argument("--record", type=Path, help="append each module's result to this file (JSON lines)")
    parser.add_argument("--resume", action="store_true", help="skip the modules the record already holds")
    parser.add_argument("--table", type=Path, help="only print the table of this record")
    parser.add_argument("--survivors", type=Path, help="run only the mutants that survived in this record")
    parser.add_argument("--extend", type=Path, help="the record's modules again, with only the mutants of the "
                                                    "--sample (same seed) that it has not run")
    args = parser.parse_args(argv)
    if args.table:
        print(table(merged(read(args.table))))
        return 0
    before = {row["module"]: row for row in merged(read(args.extend))} if args.extend else {}
    again: dict[str, set[int]] = {}
    if args.survivors:
        again = {row["module"]: {int(s.split()[0].lstrip("#")) for s in row["survivors"]}
                 for row in merged(read(args.survivors)) if row["survivors"]}
    tests = plan(args.plan)
    unknown = [m for m in args.modules if m not in tests]
    if unknown:
        parser.error(f"not in {args.plan}: {', '.join(map(str, unknown))}")
    done = set()
    if args.resume and args.record and args.record.exists():
        done = {json.loads(line)["module"] for line in args.record.read_text().splitlines() if line.strip()}
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    if args.extend and (args.sample is None or args.seed is None):
        parser.error("--extend needs --sample and the record's --seed")
    print(f"seed {seed}" + (f", {args.sample} mutants per module" if args.sample else ""), flush=True)
    rows = []
    for module in args.modules or list(tests):
        if str(module) in done or (args.survivors and str(module) not in again):
            continue
        found = mutants.mutants(module.read_text())
        only = sorted(again[str(module)]) if args.survivors else None
        chosen = mutants.choose(found, module=module, only=only, sample=None if only else args.sample, seed=seed)
        if args.extend:
            if str(module) not in before:
                continue
            old = before[str(module)]
            ran = {m.index for m in mutants.choose(found, module=module, only=None, sample=old["sample"],
                                                   seed=old["seed"])}
            chosen = [m for m in chosen if m.index not in ran]
            if not chosen:
                continue
        result = mutants.run(module, [*tests[module], "-x", "-q"], timeout=args.timeout, chosen=chosen, echo=False)
        if result is None:  # (the tests fail on the unmutated module: said above; the others still run)
            continue
        row = {"module": str(module), "killed": result.killed, "ran": len(chosen), "found": len(found),
               "seconds": round(result.seconds), "seed": seed, "sample": args.sample,
               "survivors": [f"#{m.index} line {m.line} {m.what}" for m in result.survivors],
               "rerun": bool(args.survivors), "extends": bool(args.extend)}
        print(f"{module}: {result.killed}/{len(chosen)} killed (of {len(found)}) in {result.seconds:.0f}s", flush=True)
        rows.append(row)
        if args.record:
            with args.record.open("a") as record:
                record.write(json.dumps(row) + "\n")
    print(table(merged(read(args.record)) if args.record else rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
