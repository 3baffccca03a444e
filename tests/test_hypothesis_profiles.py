"""Property tests leave randomness to the profile (tests/conftest.py): none pins its examples for ever."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

TESTS = Path(__file__).resolve().parent
PINNED = re.compile(r"@settings\([^)]*\b(derandomize|database)\s*=", re.DOTALL)


def test_no_property_test_chooses_its_own_randomness() -> None:
    pinned = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if PINNED.search(p.read_text())]
    assert not pinned, f"these set derandomize/database in @settings (the profile decides, see conftest): {pinned}"


def test_the_profiles_draw_fresh_examples_and_keep_the_failing_ones() -> None:
    for name in ("dev", "ci"):
        profile = settings.get_profile(name)
        assert not profile.derandomize
        assert isinstance(profile.database, DirectoryBasedExampleDatabase)
        assert Path(profile.database.path).parts[-2:] == (".hypothesis", "examples")
    assert settings.get_profile("ci").print_blob
    assert settings.get_profile("deterministic").derandomize and settings.get_profile("deterministic").database is None
