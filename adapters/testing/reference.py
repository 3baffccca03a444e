"""Where the reference material from other projects is, for tests that compare tether with it.

The repository holds nothing copied from other projects. Facts about them (their CRDs, their example manifests,
objects a real karmada-scheduler placed) live next to the repository in ``../shared/reference`` when it is checked
out there (next to the main checkout, for a git worktree), and tests read them from that place at test time.
Without it those tests are skipped with a reason that names the missing path, never failed: the repository must
stay testable on its own.

The repository root is found from the ``tether`` package (``tether/`` is a folder of symlinks at the root), so the
location does not depend on the working directory pytest was started from; ``TETHER_SHARED`` names another place
(a checkout whose sibling is not ``shared``, a git worktree).
"""

from __future__ import annotations

import os
from pathlib import Path

import tether

ROOT = Path(tether.__file__).resolve().parent.parent


def _shared(root: Path) -> Path:
    """``shared`` next to the repository: beside ``root``, or — ``root`` being a git worktree (``.git`` a file naming
    its git directory) — beside the main checkout the worktree belongs to."""
    beside = root.parent / "shared"
    dot_git = root / ".git"
    if beside.is_dir() or not dot_git.is_file():
        return beside
    head = dot_git.read_text(encoding="utf-8").strip()
    if not head.startswith("gitdir:"):
        return beside
    gitdir = (root / head.partition(":")[2].strip()).resolve()
    common = gitdir / "commondir"  # (the main repository's git directory, relative to the worktree's)
    if not common.is_file():
        return beside
    main = (gitdir / common.read_text(encoding="utf-8").strip()).resolve().parent
    return main.parent / "shared" if (main.parent / "shared").is_dir() else beside


SHARED = Path(os.environ["TETHER_SHARED"]) if os.environ.get("TETHER_SHARED") else _shared(ROOT)
REFERENCE = SHARED / "reference"


def reference_path(*parts: str) -> Path | None:
    """``../shared/reference/<parts>`` if it exists, else None (for ``skipif`` at collection time)."""
    path = REFERENCE.joinpath(*parts)
    return path if path.exists() else None


def missing_reason(*parts: str) -> str:
    return f"reference material from other projects not present at {REFERENCE.joinpath(*parts)}"


def require_reference(*parts: str) -> Path:
    """``../shared/reference/<parts>``, or skip the calling test saying what is missing."""
    path = reference_path(*parts)
    if path is None:
        import pytest

        pytest.skip(missing_reason(*parts))
    return path


def crd_under_group(source: Path, *, group: str, directory: Path) -> Path:
    """Another project's CRD manifest (``source``) rewritten to serve its kind under ``group``, written into
    ``directory``; returns the new file.

    A shared real cluster may already serve the original group with another schema (tether's minimal stand-in, or
    the project's own), and a test must never replace or delete a CRD it did not create. Serving the very same
    schema under a group of tether's own lets a test hold a real API server to that schema anyway; the CRD's name
    is stable (``<plural>.<group>``), so it is registered once and kept, like every CRD the tests register. The copy
    answers to no short name or category: on a shared cluster, ``kubectl get dsc`` must still mean the original."""
    import yaml

    documents = [d for d in yaml.safe_load_all(source.read_text(encoding="utf-8")) if isinstance(d, dict)]
    crd = next(d for d in documents if d.get("kind") == "CustomResourceDefinition")
    crd["spec"]["group"] = group
    crd["metadata"] = {"name": f"{crd['spec']['names']['plural']}.{group}"}
    crd.pop("status", None)
    for borrowed in ("shortNames", "categories"):
        crd["spec"]["names"].pop(borrowed, None)
    out = directory / f"{group}_{crd['spec']['names']['plural']}.yaml"
    out.write_text(yaml.safe_dump(crd, sort_keys=False), encoding="utf-8")
    return out
