"""The layers of the repository and who may import whom (the layout in the README and ``docs/design.md``).

The rule, in one sentence: **a layer imports only itself and the layers below it** —

* ``core/`` imports nothing outside ``core/``; ``projections/`` imports only ``core/``; ``adapters/`` import
  ``core/`` and ``projections/`` (and the adapter rooms below their own);
* inside ``core/``, the shared language (the modules at its top and ``core/world/``, the world's shape) imports no
  capability room, and a room imports another only along admission → datadependency;
* inside ``adapters/``, the product rooms are ordered ``log`` < ``kubernetes`` < ``daemon`` < ``cli`` (and
  ``catalog`` < ``daemon``);
  no product room imports ``adapters/testing/`` or ``adapters/sandbox/`` (the sandbox, which ships for ``tether
  demo``, holds that command; the CLI declares it by name, as it declares every command), and the sandbox never
  imports ``testing/``.

Every rule is checked by folder: a module's place decides what it may import, and there is no list of files allowed
an exception. Imports are read from the source (every ``import`` statement, including those inside functions), so a
lazy import cannot slip past; and the checker is run on a miniature tree with an upward import, to show it fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The top-level layers, bottom up: a module imports ``tether.<layer>`` only for its own layer or one below.
LAYERS = ("core", "projections", "adapters")
#: core's capability rooms; every other folder of ``core/`` (``world/``) is shared language, like its top modules.
CAPABILITIES = ("datadependency", "admission", "placement")
LANGUAGE_FOLDERS = ("world",)
ALLOWED_CAPABILITY_EDGES = {("admission", "datadependency")}
#: The product adapter rooms and the rooms each may import (the order ``log`` < ``kubernetes`` < ``daemon`` < ``cli``,
#: and ``catalog`` < ``daemon``); ``sandbox`` and ``testing`` are not product.
PRODUCT_ROOMS: dict[str, frozenset[str]] = {
    "log": frozenset(),
    "catalog": frozenset(),
    "kubernetes": frozenset({"log"}),
    "daemon": frozenset({"log", "catalog", "kubernetes"}),
    "cli": frozenset({"log", "catalog", "kubernetes", "daemon"}),
}
NOT_PRODUCT = {"sandbox": frozenset(PRODUCT_ROOMS), "testing": frozenset({*PRODUCT_ROOMS, "sandbox"})}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["tether", *parts])


def imported_modules(path: Path, *, package: str | None = None, root: Path = ROOT) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved against its package)."""
    if package is None:
        name = module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
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


def place(module: str) -> tuple[str, str]:
    """(layer, room) of a module of the package: the room is the folder under the layer (``""`` for a module at the
    layer's top, and for every module of the shared language of ``core/``)."""
    parts = module.split(".")
    layer = parts[1] if len(parts) > 1 else ""
    room = parts[2] if len(parts) > 2 and layer != "projections" else ""
    if layer == "core" and room not in CAPABILITIES:
        room = ""  # the shared language: core's top modules and its language folders (world/)
    return layer, room


def may_import(importer: str, imported: str) -> bool:
    """Whether the module ``importer`` may import ``imported`` (both ``tether.…`` names): the rule of this file."""
    (layer, room), (to_layer, to_room) = place(importer), place(imported)
    if to_layer not in LAYERS:
        return True  # not tether's (or ``tether`` itself)
    if LAYERS.index(to_layer) != LAYERS.index(layer):
        return LAYERS.index(to_layer) < LAYERS.index(layer)
    if layer == "core":
        if not to_room or to_room == room:
            return True  # the shared language, or the room's own modules
        return bool(room) and (room, to_room) in ALLOWED_CAPABILITY_EDGES
    if layer == "adapters" and to_room and to_room != room:
        allowed = PRODUCT_ROOMS.get(room, NOT_PRODUCT.get(room, frozenset()))
        return to_room in allowed
    return True


def upward_imports(root: Path, layer: str) -> list[str]:
    """Every import in ``root/<layer>`` that the rule forbids, as ``path imports module``."""
    found = []
    for path in sources(root / layer):
        importer = module_name(path, root)
        found += [f"{path.relative_to(root)} imports {m}" for m in sorted(imported_modules(path, root=root))
                  if m.startswith("tether.") and not may_import(importer, m)]
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_every_layer_imports_only_itself_and_the_layers_below(layer: str) -> None:
    assert upward_imports(ROOT, layer) == []


def test_the_rule_fails_on_an_upward_import(tmp_path: Path) -> None:
    """The checker itself, on a miniature tree: each kind of upward import is caught, the downward ones are not."""
    probes = {
        "core/world/shape.py": "from tether.projections.fold import evolve\n",  # core → projections
        "core/kube.py": "from tether.core.placement.decider import decide_pods\n",  # language → room
        "core/placement/decider.py": "from tether.core.admission import decider\n",  # room → room, no edge
        "projections/fold.py": "def f():\n    from tether.adapters.log import EventLog\n",  # lazy, → adapters
        "adapters/catalog/executor.py": "from ..daemon.metrics import Metrics\n",  # product room → a higher one
        "adapters/cli/run.py": "import tether.adapters.sandbox.demo\n",  # product → sandbox
        "adapters/sandbox/demo.py": "from tether.adapters.testing import tether_stack\n",  # sandbox → testing
        # allowed: downward, along the edge, and within a room
        "core/admission/decider.py": "from tether.core.datadependency import decider\nfrom ..world import World\n",
        "projections/step.py": "from tether.core.placement.decider import decide_pods\nfrom .fold import evolve\n",
        "adapters/daemon/daemon.py": "from tether.adapters.catalog.executor import CatalogExecutor\n",
    }
    for name, text in probes.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = [line for layer in LAYERS for line in upward_imports(tmp_path, layer)]
    assert found == [
        "core/kube.py imports tether.core.placement.decider",
        "core/kube.py imports tether.core.placement.decider.decide_pods",
        "core/placement/decider.py imports tether.core.admission",
        "core/placement/decider.py imports tether.core.admission.decider",
        "core/world/shape.py imports tether.projections.fold",
        "core/world/shape.py imports tether.projections.fold.evolve",
        "projections/fold.py imports tether.adapters.log",
        "projections/fold.py imports tether.adapters.log.EventLog",
        "adapters/catalog/executor.py imports tether.adapters.daemon.metrics",
        "adapters/catalog/executor.py imports tether.adapters.daemon.metrics.Metrics",
        "adapters/cli/run.py imports tether.adapters.sandbox.demo",
        "adapters/sandbox/demo.py imports tether.adapters.testing",
        "adapters/sandbox/demo.py imports tether.adapters.testing.tether_stack",
    ]


def test_the_rule_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The checker itself: an import inside a function and a relative import are both found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..testing import tether_stack\n    import tether.adapters.sandbox.demo\n")
    found = imported_modules(probe, package="tether.adapters.cli")
    assert "tether.adapters.testing.tether_stack" in found
    assert "tether.adapters.sandbox.demo" in found


def test_the_layers_and_rooms_are_the_folders_the_rule_names() -> None:
    """Every folder is placed by the rule: a new room is added to it, not left to a default."""
    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name in LAYERS) == sorted(LAYERS)
    rooms = sorted(p.name for p in (ROOT / "core").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert rooms == sorted((*CAPABILITIES, *LANGUAGE_FOLDERS))
    shared = sorted(p.stem for p in (ROOT / "core").glob("*.py") if p.stem != "__init__")
    assert shared == ["api", "commands", "decision", "envelope", "events", "identity", "integers", "keys", "kube",
                      "lazy", "locality", "plugin_config", "quantity"]
    adapter_rooms = sorted(p.name for p in (ROOT / "adapters").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert adapter_rooms == sorted((*PRODUCT_ROOMS, *NOT_PRODUCT))


def test_adapters_root_holds_folders_only() -> None:
    loose = sorted(p.name for p in (ROOT / "adapters").iterdir() if p.is_file() and p.name != "__init__.py")
    assert loose == []


def test_the_cli_declares_commands_of_the_cli_and_the_sandbox_only() -> None:
    """Subcommands are imported by name when they run (``adapters/cli/lazy_group.py``): the declarations are the
    CLI's only way into another room, and they point into the CLI itself or the sandbox (``tether demo``)."""
    from tether.adapters.cli import COMMANDS, LOG_COMMANDS

    declared = (*COMMANDS.values(), *LOG_COMMANDS.values())
    rooms = {place(command.where.partition(":")[0])[1] for command in declared}
    assert rooms <= {"cli", "sandbox"}


# --- no import cycle ---------------------------------------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    paths = sources(ROOT / "core") + sources(ROOT / "projections")
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
