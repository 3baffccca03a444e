"""A small mutation-testing run: break one module in many small ways, one at a time, and see which the tests catch.

    python ops/mutants.py adapters/kubernetes/leader.py [--timeout S] [--only N ...] -- tests/integration -x

Each mutant changes one thing in the module — a comparison flipped (``<`` ↔ ``<=``, ``==`` ↔ ``!=``, ``in`` ↔
``not in``), ``and`` ↔ ``or``, an ``if``'s condition negated, ``True`` ↔ ``False``, one statement in a function body
(an expression, an assignment, a ``raise``) replaced by ``pass`` — then the given pytest arguments run against it; a
mutant the tests still pass on *survives*. The report is the score (killed / mutants) and every survivor with its
line, for a person to judge: a survivor is either a missing test or a change that makes no difference (an
equivalent mutant, a log line). The module is restored after each run, and at the end whatever happens.

Why not mutmut or cosmic-ray: both copy or rewrite the package in place of the import path, which the ``tether/``
folder of symlinks defeats, and both mutate whole trees, where what is useful on a shared two-core machine is one
module against the few tests that claim to cover it. The mutants are made from the AST (``ast.unparse``: comments
and layout are lost in the mutated copy, nothing else). Docstrings and ``log.*(...)`` calls are not mutated.
"""

from __future__ import annotations

import argparse
import ast
import copy
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}


@dataclass(frozen=True)
class Mutant:
    index: int
    line: int
    what: str


def _is_log_call(node: ast.AST) -> bool:
    call = node.value if isinstance(node, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "log")


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every place a mutant can be made, in a stable order, with what it would do."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _SWAPS:
                    yield node, f"cmp:{i}:{type(op).__name__}→{_SWAPS[type(op)].__name__}"
        elif isinstance(node, ast.BoolOp):
            yield node, f"boolop:{type(node.op).__name__}"
        elif isinstance(node, ast.If | ast.While):
            yield node, "negate"
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            yield node, f"const:{node.value}→{not node.value}"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for i, stmt in enumerate(node.body):
                if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    continue  # the docstring
                if isinstance(stmt, ast.Expr | ast.Assign | ast.AugAssign | ast.Raise) and not _is_log_call(stmt):
                    yield node, f"drop:{i}"
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue  # (a module's or class's statements define things: dropping one only breaks the import)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.Expr | ast.Assign | ast.AugAssign | ast.Raise) and not _is_log_call(stmt):
                    yield node, f"drop-{field}:{i}"


def _apply(node: ast.AST, what: str) -> int:
    """Make the mutation on ``node``; returns the line it changed."""
    kind, _, arg = what.partition(":")
    if kind == "cmp":
        assert isinstance(node, ast.Compare)
        i = int(arg.split(":")[0])
        node.ops[i] = _SWAPS[type(node.ops[i])]()
        return node.lineno
    if kind == "boolop":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return node.lineno
    if kind == "negate":
        assert isinstance(node, ast.If | ast.While)
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
        return node.lineno
    if kind == "const":
        assert isinstance(node, ast.Constant)
        node.value = not node.value
        return node.lineno
    field = "body" if kind == "drop" else kind.removeprefix("drop-")
    body = getattr(node, field)
    stmt = body[int(arg)]
    body[int(arg)] = ast.copy_location(ast.Pass(), stmt)
    return stmt.lineno


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    out = []
    for i, (node, what) in enumerate(_sites(tree)):
        line = _apply(copy.deepcopy(node), what)  # (on a copy: only to learn the line)
        out.append(Mutant(index=i, line=line, what=what))
    return out


def mutated(source: str, index: int) -> str:
    tree = ast.parse(source)
    for i, (node, what) in enumerate(_sites(tree)):
        if i == index:
            _apply(node, what)
            return ast.unparse(ast.fix_missing_locations(tree))
    raise IndexError(index)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test run (a hang counts as killed)")
    parser.add_argument("--only", type=int, nargs="*", help="run these mutant indexes only")
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        parser.error("give the tests to run after --: ops/mutants.py MODULE [options] -- PYTEST_ARGS")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    pytest_args = argv[split + 1:]
    original = args.module.read_text()
    found = mutants(original)
    chosen = [m for m in found if args.only is None or m.index in args.only]
    lines = original.splitlines()
    survivors: list[Mutant] = []
    started = time.monotonic()

    def passes(source: str, *, show: bool = False) -> bool:
        args.module.write_text(source)
        try:
            result = subprocess.run([sys.executable, "-m", "pytest", *pytest_args, "-p", "no:cacheprovider"],
                                    capture_output=True, timeout=args.timeout, check=False)
            if show and result.returncode != 0:
                print(result.stdout.decode(errors="replace")[-3000:], result.stderr.decode(errors="replace")[-3000:],
                      file=sys.stderr)
            return result.returncode == 0
        except subprocess.TimeoutExpired:
            return False
        finally:
            args.module.write_text(original)

    try:
        # the baseline: the module as the mutants are written (unparsed, comments gone) must pass, or every mutant
        # would count as killed
        if not passes(ast.unparse(ast.parse(original)), show=True):
            print(f"the tests fail on the unmutated {args.module} (as unparsed): fix that first", file=sys.stderr)
            return 2
        for m in chosen:
            survived = passes(mutated(original, m.index))
            mark = "SURVIVED" if survived else "killed  "
            print(f"{mark} #{m.index:<3} line {m.line:<4} {m.what:<24} {lines[m.line - 1].strip()[:80]}", flush=True)
            if survived:
                survivors.append(m)
    finally:
        args.module.write_text(original)
    killed = len(chosen) - len(survivors)
    print(f"\n{args.module}: {killed}/{len(chosen)} mutants killed "
          f"({100 * killed / max(1, len(chosen)):.0f}%) in {time.monotonic() - started:.0f}s; "
          f"{len(survivors)} survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
