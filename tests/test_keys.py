"""Every annotation key, label key, finalizer and gate name is defined once, in ``core/keys.py``.

The sources (``core/``, ``projections/``, ``adapters/`` — the sandbox and the test machinery included — and
``ops/``) are read as Python: a string literal anywhere but ``core/keys.py`` that is one of its keys, or that has
the shape of a key in a domain tether reads or writes (``tether.dev/...``, ``volcano.sh/...``, Karmada's,
Kubernetes', Godel's, Fluid's), fails the test — import the name from ``tether.core.keys`` (adding it there when it
is new). Docstrings are prose, and not read; ``tests/`` keeps literals on purpose (they pin the wire names).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tether.core import keys

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("core", "projections", "adapters", "ops")
KEYS_MODULE = ROOT / "core" / "keys.py"

#: ``<dns-subdomain>/<name>`` in one of the domains of the keys tether names; an API group/version is no key.
_KEY_SHAPE = re.compile(r"^(?:[a-z0-9-]+\.)+[a-z]+/[A-Za-z0-9][A-Za-z0-9._-]*$")
_GROUP_VERSION = re.compile(r"/v\d+(?:(?:alpha|beta)\d+)?$")
DOMAINS = ("tether.dev", "tether.io", "volcano.sh", "karmada.io", "kubernetes.io", "fluid.io", "bytedance.com",
           "kubewharf.io")


def defined_keys() -> set[str]:
    return {value for name, value in vars(keys).items() if name.isupper() and isinstance(value, str)}


def looks_like_a_key(text: str) -> bool:
    if not _KEY_SHAPE.match(text) or _GROUP_VERSION.search(text):
        return False
    domain = text.split("/", 1)[0]
    return any(domain == d or domain.endswith("." + d) for d in DOMAINS)


def literal_keys(path: Path, known: set[str]) -> list[str]:
    """``path:line: literal`` for every string literal of ``path`` (docstrings and other bare strings aside) that is
    a known key or has the shape of one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.lineno}: {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
            and (node.value in known or looks_like_a_key(node.value))]


def test_no_key_is_written_outside_the_keys_module() -> None:
    known = defined_keys()
    found = [hit for folder in SOURCES for path in sorted((ROOT / folder).rglob("*.py"))
             if path != KEYS_MODULE and "__pycache__" not in path.parts for hit in literal_keys(path, known)]
    assert found == []


def test_each_key_is_written_once_in_the_keys_module() -> None:
    """One literal per key: a second name for the same key is an assignment of the first (the placement annotation
    is the gate's name on purpose), never a second copy of the string."""
    tree = ast.parse(KEYS_MODULE.read_text())
    literals = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)]
    assert len(literals) == len(set(literals))
    assert all(looks_like_a_key(key) or key.endswith(("-", "/")) for key in literals)
    assert keys.PLACEMENT_ANNOTATION is keys.PLACEMENT_GATE


def test_tethers_own_keys_carry_its_prefixes() -> None:
    """The competing-writer check watches the keys under tether's prefixes: every key of tether's own is one."""
    own = [keys.CLAIM_FINALIZER, keys.DATASOURCE_FINALIZER, keys.PLACEMENT_INJECTED_ANNOTATION,
           keys.EXCLUDED_CLUSTERS_ANNOTATION, keys.ADDED_BY_TERM_ANNOTATION, keys.LOCATION_ANNOTATION,
           keys.ADMISSION_ANNOTATION, keys.ADMITTED_REQUEST_ANNOTATION, keys.OVERRUN_ANNOTATION,
           keys.RELEASED_ANNOTATION, keys.EVICTED_FOR_ANNOTATION, keys.PLACEMENT_GATE, keys.POD_PLACEMENT_LABEL]
    assert [key for key in own if not key.startswith(keys.TETHER_KEY_PREFIXES)] == []


def test_the_reader_finds_a_key_written_as_a_literal(tmp_path: Path) -> None:
    """The checker itself: a known key, a new key of tether's domain and a Kubernetes label are found, in code and
    in an f-string; prose, API versions and other strings are not."""
    probe = tmp_path / "probe.py"
    probe.write_text('"""Reads tether.dev/admission (prose)."""\n'
                     'A = {"tether.dev/admission": "x", "apps/v1": 1, "scheduling.volcano.sh/v1beta1": 2}\n'
                     'B = f"tether.dev/new-key"\n'
                     'C = ("kubernetes.io/hostname", "nvidia.com/gpu", "s3://warehouse/")\n')
    assert literal_keys(probe, defined_keys()) == ["probe.py:2: tether.dev/admission", "probe.py:3: tether.dev/new-key",
                                                   "probe.py:4: kubernetes.io/hostname"]
