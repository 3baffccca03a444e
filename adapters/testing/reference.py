"""Where the reference material from other projects is, for tests that compare tether with it.

The repository holds nothing copied from other projects. Facts about them (their CRDs, their example manifests,
objects a real karmada-scheduler placed) live next to the repository in ``../shared/reference`` when it is checked
out there, and tests read them from that place at test time. Without it those tests are skipped with a reason that
names the missing path, never failed: the repository must stay testable on its own.

The repository root is found from the ``tether`` package (``tether/`` is a folder of symlinks at the root), so the
location does not depend on the working directory pytest was started from.
"""

from __future__ import annotations

from pathlib import Path

import tether

ROOT = Path(tether.__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
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
