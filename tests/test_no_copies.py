"""Nothing in the repository is a copy of another project's file.

Facts about other projects (their CRDs, their examples, their notes) are kept next to the repository in
``../shared`` and read from there at test time; the repository holds only what was written or generated here. This
test compares every file git tracks with every file under ``../shared``, byte for byte (size first, then SHA-256).
Files of 200 bytes or less are ignored: at that size identical content (an empty ``__init__.py``, a two-line
config) says nothing about where it came from. Skipped with a reason when ``../shared`` is absent or the checkout
is not a git work tree.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from tether.adapters.testing.reference import ROOT, SHARED

TINY = 200


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shared_files() -> dict[tuple[int, str], Path]:
    out: dict[tuple[int, str], Path] = {}
    for path in sorted(SHARED.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.stat().st_size > TINY:
            out[(path.stat().st_size, digest(path))] = path
    return out


def tracked_files() -> list[Path]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"{ROOT} is not a git work tree")
    return [ROOT / name for name in done.stdout.decode().split("\0") if name]


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"no reference material from other projects at {SHARED}")
def test_no_tracked_file_is_a_copy_of_a_file_in_shared() -> None:
    reference = shared_files()
    sizes = {size for size, _ in reference}
    copies = []
    for path in tracked_files():
        if not path.is_file() or path.is_symlink():
            continue  # deleted in the work tree, or a link (tether/ maps the package onto the folders)
        size = path.stat().st_size
        if size > TINY and size in sizes:
            original = reference.get((size, digest(path)))
            if original is not None:
                copies.append(f"{path.relative_to(ROOT)} is a copy of {original}")
    assert not copies, "\n".join(copies)
