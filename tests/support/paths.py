"""Where the tests find the project and ../shared (its real transcripts)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
REAL = SHARED / "fixtures" / "real"
