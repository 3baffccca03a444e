"""Find and parse CRD manifests shipped with tether (``ops/crds``, reachable as ``tether/crds``).

``ops/crds`` holds tether's own CRDs (generated from ``tether.core.api``) and, in ``upstream/``, tether's minimal
schemas of the Karmada, Volcano, Godel and Fluid kinds the emulator serves (the fields tether and the stand-ins use,
everything else preserved; the real CRDs come with those projects). Both are written by ``ops/crds/generate.py``.
Tests that want another project's exact CRD pass its path (``../shared/reference/...``) instead of a name.

``ops/crds`` is data, not a package (no ``__init__.py``), so lookup is path based:
``Path(tether.__file__).parent / "crds"``. Parsed documents are cached per (path, mtime) because tests register
them often (and Karmada's own binding CRDs, when a test loads them, are large).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def crd_dir() -> Path:
    import tether

    return Path(tether.__file__).resolve().parent / "crds"


@functools.lru_cache(maxsize=256)
def _parse(path: str, mtime: float) -> tuple[dict[str, Any], ...]:
    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.load_all(f, Loader=_Loader) if isinstance(d, dict)]
    return tuple(d for d in docs if d.get("kind") == "CustomResourceDefinition")


def _files(ref: str | Path) -> list[Path]:
    p = Path(ref)
    if p.is_dir():
        return sorted(x for x in p.rglob("*.yaml"))
    if p.is_file():
        return [p]
    # A bare name: a CRD name ("datasourceclaims.datadependency.volcano.sh") or a file stem under tether/crds.
    base = crd_dir()
    hits = sorted(x for x in base.rglob("*.yaml") if str(ref) in x.name)
    if not hits:
        raise FileNotFoundError(f"no CRD manifest matches {ref!r} (looked in {base})")
    return hits


def load_crd_documents(*refs: str | Path | Iterable[str | Path]) -> list[dict[str, Any]]:
    """CRD documents from files, directories or names under ``tether/crds``; deep copies, safe to mutate.

    With no argument, every CRD tether ships (its own and its minimal schemas of other projects' kinds in
    ``upstream/``).
    """
    flat: list[str | Path] = []
    for r in refs or (crd_dir(),):
        if isinstance(r, str | Path):
            flat.append(r)
        else:
            flat.extend(r)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for ref in flat:
        for f in _files(ref):
            for doc in _parse(str(f), f.stat().st_mtime):
                name = doc["metadata"]["name"]
                if name not in seen:
                    seen.add(name)
                    out.append(copy.deepcopy(doc))
    return out


def clean_for_create(doc: dict[str, Any]) -> dict[str, Any]:
    """Drop the ``status`` block some published CRD manifests carry (a create may not set it anyway)."""
    doc = copy.deepcopy(doc)
    doc.pop("status", None)
    for k in ("resourceVersion", "uid", "creationTimestamp", "generation"):
        doc.get("metadata", {}).pop(k, None)
    return doc
