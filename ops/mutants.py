"""A small mutation-testing run: break one module in many small ways, one at a time, and see which the tests catch.

    python ops/mutants.py adapters/kubernetes/leader.py [--timeout S] [--only N ...] [--sample N --seed S] \
        -- tests/integration/test_leader.py -x
    python ops/mutants_all.py [--sample N --seed S] [MODULE ...]    # the modules of ops/mutants.plan, a table

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
import contextlib
import copy
import importlib
import os
import random
import signal
import sys
import tempfile
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
    # a constant given as a keyword (``frozen=True``) is named by it: the line alone does not say which one flips
    keywords = {id(k.value): k.arg for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg}
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
            name = f"{keywords[id(node)]}=" if id(node) in keywords else ""
            yield node, f"const:{name}{node.value}→{not node.value}"
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
    body: list[ast.stmt] = getattr(node, field)
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


@dataclass(frozen=True)
class Result:
    module: Path
    found: int
    chosen: list[Mutant]
    survivors: list[Mutant]
    seconds: float

    @property
    def killed(self) -> int:
        return len(self.chosen) - len(self.survivors)


# imported once by the runner before it forks a child per mutant, so that a test run pays for the tests and for
# tether's own modules, not for importing these again (third-party only: a tether module imported here would be
# the unmutated one in every child; pytest's plugins are not here, pytest wants to import them itself)
_PRELOAD = ("pytest", "hypothesis", "aiohttp", "kubernetes_asyncio.client", "yaml", "cryptography.x509", "trustme",
            "anyio", "pydantic")


def choose(found: list[Mutant], *, module: Path, only: list[int] | None, sample: int | None,
           seed: int) -> list[Mutant]:
    """The mutants to run: ``only`` those indexes, or a deterministic random ``sample`` of them (same seed, same
    module → the same mutants), or all."""
    chosen = [m for m in found if only is None or m.index in only]
    if sample is not None and sample < len(chosen):
        chosen = sorted(random.Random(f"{seed}:{module}").sample(chosen, sample), key=lambda m: m.index)
    return chosen


def _cached_bytecode(module: Path, cache: Path) -> Iterator[Path]:
    """The module's compiled copies in the bytecode cache (imported through ``tether/``'s symlinks or not)."""
    parent = str(module.resolve().parent.relative_to(Path.cwd().resolve()))
    yield from (p for p in cache.rglob(f"{module.stem}.*.pyc") if str(p.parent).endswith(parent))


def run(module: Path, pytest_args: list[str], *, timeout: float, chosen: list[Mutant],
        echo: bool = True) -> Result | None:
    """Run each chosen mutant of ``module`` against the tests; None when the tests fail on the unmutated module.

    Each test run is a fork of this process (with the third-party modules above already imported) calling
    ``pytest.main`` — a fresh ``python -m pytest`` paid ~3 s of imports per mutant. Compiled modules are cached
    (in ``.mutants-cache/``, not beside the sources, whatever ``PYTHONDONTWRITEBYTECODE`` says: compiling tether
    and rewriting the tests' asserts on every run cost more than the tests); the mutated module's own cached copy
    is deleted on every write, as a mutant of the same size written in the same second would pass for fresh.
    Hypothesis runs its ``deterministic`` profile unless ``TETHER_HYPOTHESIS`` says otherwise, so that a score
    does not depend on the examples drawn."""
    for name in _PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    cache = Path(".mutants-cache").resolve()
    sys.pycache_prefix = str(cache)
    sys.dont_write_bytecode = False
    os.environ.setdefault("TETHER_HYPOTHESIS", "deterministic")
    # stopped (kill, or Ctrl-C where a background start ignores it), the module is restored all the same
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    original = module.read_text()
    stat = module.stat()
    lines = original.splitlines()
    survivors: list[Mutant] = []
    started = time.monotonic()

    def write(source: str) -> None:
        module.write_text(source)
        for stale in _cached_bytecode(module, cache):
            stale.unlink(missing_ok=True)

    def passes(source: str, *, show: bool = False) -> bool:
        write(source)
        try:
            return _pytest_in_a_fork(pytest_args, timeout=timeout, show=show)
        finally:
            write(original)
            os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    try:
        # the baseline: the module as the mutants are written (unparsed, comments gone) must pass, or every mutant
        # would count as killed
        if not passes(ast.unparse(ast.parse(original)), show=True):
            print(f"the tests fail on the unmutated {module} (as unparsed): fix that first", file=sys.stderr)
            return None
        # a mutant that makes the tests hang (a loop that never ends, a wait for what never comes) is killed at
        # four times the unmutated run, not after the whole --timeout
        timeout = min(timeout, max(20.0, 4 * (time.monotonic() - started)))
        for m in chosen:
            survived = passes(mutated(original, m.index))
            if echo or survived:
                mark = "SURVIVED" if survived else "killed  "
                print(f"{mark} {module}#{m.index:<3} line {m.line:<4} {m.what:<24} {lines[m.line - 1].strip()[:80]}",
                      flush=True)
            if survived:
                survivors.append(m)
    finally:
        write(original)
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return Result(module=module, found=len(mutants(original)), chosen=chosen, survivors=survivors,
                  seconds=time.monotonic() - started)


def _pytest_in_a_fork(pytest_args: list[str], *, timeout: float, show: bool) -> bool:
    """True when the tests pass; a run past ``timeout`` (a hang) is killed, with whatever it started, and fails."""
    sys.stdout.flush()
    with tempfile.TemporaryFile() as output:
        pid = os.fork()
        if pid == 0:  # the child: its own process group (to be killed whole), its output to the file
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.setpgid(0, 0)
                os.dup2(output.fileno(), 1)
                os.dup2(output.fileno(), 2)
                import pytest
                code = pytest.main([*pytest_args, "-p", "no:cacheprovider"])
            except BaseException:  # whatever happens in the child is a failed run
                code = 99
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(code))
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return False
            time.sleep(0.05)
        passed = os.waitstatus_to_exitcode(status) == 0
        if show and not passed:
            output.seek(0)
            print(output.read().decode(errors="replace")[-6000:], file=sys.stderr)
        return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path)
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds per test run at most, and 4 times the unmutated run (a hang is a kill)")
    parser.add_argument("--only", type=int, nargs="*", help="run these mutant indexes only")
    parser.add_argument("--sample", type=int, help="run a random sample of this many mutants (deterministic: --seed)")
    parser.add_argument("--seed", type=int, help="the sample's seed (printed; random when not given)")
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        parser.error("give the tests to run after --: ops/mutants.py MODULE [options] -- PYTEST_ARGS")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    original = args.module.read_text()
    chosen = choose(mutants(original), module=args.module, only=args.only, sample=args.sample, seed=seed)
    if args.sample is not None:
        print(f"sample of {args.sample} mutants, seed {seed} (repeat with --sample {args.sample} --seed {seed})")
    result = run(args.module, argv[split + 1:], timeout=args.timeout, chosen=chosen)
    if result is None:
        return 2
    print(f"\n{args.module}: {result.killed}/{len(result.chosen)} mutants killed "
          f"({100 * result.killed / max(1, len(result.chosen)):.0f}%) in {result.seconds:.0f}s; "
          f"{len(result.survivors)} survived (of {result.found} mutants in the module)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
