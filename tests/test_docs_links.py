"""The user documentation holds together: README.md stays short, and no relative link in it or in docs/ is broken.

README.md is the front door — what tether is, the two commands, how to run it against a cluster — and each
capability's depth lives on its own page in docs/. Moving text between pages is how links break silently, so every
relative link in README.md and docs/*.md must name a file that exists and, when it carries a ``#fragment`` into a
Markdown file, a heading of that file (GitHub's anchor rules). Links inside fenced code blocks are not links, and
absolute URLs are not checked (no network in tests).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

README_LIMIT_BYTES = 30_000

# Pages other branches are writing at the same time, linked from here before they land. Empty this set when they
# are merged: a link to a page that still does not exist then fails like any other.
PENDING: set[str] = set()

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = _anchor(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
    return anchors


def _relative_links(page: Path) -> list[str]:
    links = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto: …
                continue
            links.append(target)
    return links


def _broken(page: Path, target: str) -> str | None:
    path_part, _, fragment = target.partition("#")
    resolved = (page.parent / path_part).resolve() if path_part else page
    try:
        repo_relative = resolved.relative_to(ROOT).as_posix()
    except ValueError:
        return f"{target} leaves the repository"
    if repo_relative in PENDING:
        return None
    if not resolved.exists():
        return f"{target}: {repo_relative} does not exist"
    if fragment and resolved.suffix == ".md" and fragment not in _anchors(resolved):
        return f"{target}: {repo_relative} has no heading with the anchor #{fragment}"
    return None


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    problems = [problem for target in _relative_links(page) if (problem := _broken(page, target))]
    assert not problems, f"broken links in {page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_docs_page_opens_with_what_it_is_for(page: Path) -> None:
    """A title, then a paragraph of prose saying what the page is for — not straight into a heading or a table."""
    blocks = [block.strip() for block in page.read_text(encoding="utf-8").split("\n\n") if block.strip()]
    assert blocks and blocks[0].startswith("# "), f"{page.name} does not start with a '# ' title"
    assert len(blocks) > 1 and not blocks[1].startswith(("#", "|", "```", "*", "-", ">")), (
        f"{page.name}: the title is not followed by a paragraph saying what the page is for")


def test_readme_stays_short() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT_BYTES, (
        f"README.md is {size} bytes (limit {README_LIMIT_BYTES}): move depth to a page in docs/")


def test_the_checker_sees_a_broken_link() -> None:
    """The link check itself can fail: a missing file and a missing anchor are both reported."""
    page = ROOT / "docs" / "operations.md"
    assert _broken(page, "no-such-page.md") is not None
    assert _broken(page, "kafka.md#no-such-heading") is not None
    assert _broken(page, "kafka.md") is None
    assert _anchor("Replay (`ops/bench/replay.py`)") == "replay-opsbenchreplaypy"
