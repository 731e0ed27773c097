"""Shared test fixtures; what tests import lives in tests/support/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.paths import REAL

# Session fixtures defined beside what they start: ``shared_stack`` (tests/support/stack.py).
pytest_plugins = ["tests.support.stack"]


@pytest.fixture
def real_tree() -> Path:
    """The real transcripts of ../shared; skipped only outside CI when absent."""
    if not (REAL / "projects").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{REAL} is missing in CI")
        pytest.skip(f"{REAL} is absent")
    return REAL
