"""A full disk under the ledger is called a full disk, also at the v1 migration (round 3, #16)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.ledger import slots
from exporter.ledger.schema import create_slot_tables
from exporter.sqlite import sqlite3
from tests.support.paths import ROOT

V1_FIXTURE = Path(__file__).parent / "golden" / "ledger_v1.sqlite3"


@pytest.fixture(params=[60, 72, 96])
def nearly_full(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of a few KiB more than the v1 ledger copied into it (root only)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={request.param}k,mode=0700",
                           "tmpfs", str(mnt)], capture_output=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        shutil.copy(V1_FIXTURE, mnt / "ledger.sqlite3")
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_the_v1_migration_on_a_nearly_full_disk_says_disk_full(nearly_full: Path,
                                                                tmp_path: Path) -> None:
    """A report over a v1 ledger with no room left: exit 3 naming the full disk, nothing stray."""
    data = tmp_path / "projects"
    data.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(data),
         "--state-dir", str(nearly_full)], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=False)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "full" in proc.stderr and "no transaction is active" not in proc.stderr, proc.stderr


def test_a_slot_read_that_fails_is_not_taken_for_a_missing_table(tmp_path: Path) -> None:
    """Only a missing slot_meta means "no version yet"; any other failure is raised."""
    db = sqlite3.connect(tmp_path / "l.db", isolation_level=None)
    assert slots.version(db) == 0  # no slot_meta: a ledger from before it
    create_slot_tables(db)
    db.set_progress_handler(lambda: 1, 1)  # every statement is interrupted
    with pytest.raises(sqlite3.OperationalError, match="interrupt"):
        slots.version(db)
    with pytest.raises(sqlite3.OperationalError, match="interrupt"):
        slots.stored_thresholds(db)
