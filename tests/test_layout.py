"""The rooms of the repository and who may import whom (the layout in the README).

* ``core/`` and ``projections/`` are pure: they import nothing from ``adapters/``;
* ``adapters/`` holds folders only (one per outside system or role) and its ``__init__.py``;
* product adapters never import ``adapters/testing/``, and only the demo command imports ``adapters/sandbox/``.

Imports are read from the source (every ``import`` statement, including those inside functions), so a lazy
import cannot slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ROOT / "adapters"
PRODUCT_ROOMS = ("log", "kubernetes", "catalog", "daemon", "cli")
SANDBOX_IMPORTERS = {"adapters/cli/demo.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["tether", *parts])


def imported_modules(path: Path, *, package: str | None = None) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved against its package)."""
    if package is None:
        package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def violations(paths: list[Path], forbidden: str) -> list[str]:
    return [f"{p.relative_to(ROOT)} imports {m}" for p in paths for m in sorted(imported_modules(p))
            if m == forbidden or m.startswith(forbidden + ".")]


@pytest.mark.parametrize("room", ["core", "projections"])
def test_pure_rooms_import_no_adapter(room: str) -> None:
    assert violations(sources(ROOT / room), "tether.adapters") == []


def test_adapters_root_holds_folders_only() -> None:
    loose = sorted(p.name for p in ADAPTERS.iterdir() if p.is_file() and p.name != "__init__.py")
    assert loose == []


@pytest.mark.parametrize("room", PRODUCT_ROOMS)
def test_product_never_imports_test_machinery(room: str) -> None:
    assert violations(sources(ADAPTERS / room), "tether.adapters.testing") == []


@pytest.mark.parametrize("room", PRODUCT_ROOMS)
def test_only_the_demo_command_imports_the_sandbox(room: str) -> None:
    paths = [p for p in sources(ADAPTERS / room) if str(p.relative_to(ROOT)) not in SANDBOX_IMPORTERS]
    assert violations(paths, "tether.adapters.sandbox") == []


def test_the_sandbox_never_imports_test_machinery() -> None:
    assert violations(sources(ADAPTERS / "sandbox"), "tether.adapters.testing") == []


def test_the_rule_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The checker itself: an import inside a function and a relative import are both found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..testing import daemon\n    import tether.adapters.sandbox.demo\n")
    found = imported_modules(probe, package="tether.adapters.cli")
    assert "tether.adapters.testing.daemon" in found
    assert "tether.adapters.sandbox.demo" in found


# --- core/ in rooms ---------------------------------------------------------------------------------------------
#
# core/ top holds the shared language (events, commands, envelope, kube, quantity, identity, api, decision, lazy)
# and the composition root (pipeline); each capability is a room. The rules:
#
# * the shared language imports no capability (pipeline alone composes the deciders);
# * a capability imports the shared language and projections, and another capability only along the allowed edges
#   (admission reads data dependency's decision pass and exclusions: where a binding's data is) — never back;
# * only a room's deciders and webhook decisions read projections (projections read the rooms' pure types and
#   specs, so the reverse would be a cycle);
# * no import cycle among core/ and projections/ modules.

CORE = ROOT / "core"
CAPABILITIES = ("datadependency", "admission", "placement")
ALLOWED_CAPABILITY_EDGES = {("admission", "datadependency")}
COMPOSITION_ROOT = "tether.core.pipeline"
READS_PROJECTIONS = {"decider.py", "webhook_decision.py"}


def capability_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["tether", "core"] and parts[2] in CAPABILITIES else None


def test_core_top_is_the_shared_language_and_the_rooms() -> None:
    rooms = sorted(p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert rooms == sorted(CAPABILITIES)
    shared = sorted(p.stem for p in CORE.glob("*.py") if p.stem != "__init__")
    assert shared == ["api", "commands", "decision", "envelope", "events", "identity", "integers", "kube", "lazy",
                      "pipeline", "quantity"]


def test_the_shared_language_imports_no_capability() -> None:
    found = [f"{p.relative_to(ROOT)} imports {m}" for p in sorted(CORE.glob("*.py"))
             if module_name(p) != COMPOSITION_ROOT for m in sorted(imported_modules(p)) if capability_of(m)]
    assert found == []


@pytest.mark.parametrize("room", CAPABILITIES)
def test_a_capability_imports_another_only_along_an_allowed_edge(room: str) -> None:
    found = [f"{p.relative_to(ROOT)} imports {m}" for p in sources(CORE / room) for m in sorted(imported_modules(p))
             if (other := capability_of(m)) and other != room and (room, other) not in ALLOWED_CAPABILITY_EDGES]
    found += violations(sources(CORE / room), COMPOSITION_ROOT)
    assert found == []


@pytest.mark.parametrize("room", CAPABILITIES)
def test_only_deciders_and_webhook_decisions_read_projections(room: str) -> None:
    paths = [p for p in sources(CORE / room) if p.name not in READS_PROJECTIONS]
    assert violations(paths, "tether.projections") == []


def test_projections_never_import_a_decider() -> None:
    found = [f"{p.relative_to(ROOT)} imports {m}" for p in sources(ROOT / "projections")
             for m in sorted(imported_modules(p)) if m == COMPOSITION_ROOT
             or (capability_of(m) and m.split(".")[3:4] and m.split(".")[3] + ".py" in READS_PROJECTIONS)]
    assert found == []


def import_graph() -> dict[str, set[str]]:
    paths = sources(CORE) + sources(ROOT / "projections")
    modules = {module_name(p): p for p in paths}
    return {name: {m for m in imported_modules(path) if m in modules and m != name} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle (as a path that returns to its start), or [] (a package's ``__init__`` importing nothing,
    an edge to a package is an edge to its ``__init__``)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_no_import_cycle_in_core_and_projections() -> None:
    assert find_cycle(import_graph()) == []


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []
