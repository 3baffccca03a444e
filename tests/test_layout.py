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
