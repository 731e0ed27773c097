"""The SQLite driver (exporter.sqlite): one library per process, the same figures from either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Runs the console script's entry; ``python`` first hides pysqlite3, as where its wheel is
# not installed. At exit it tells which driver ran and which SQLite libraries were loaded.
_SCRIPT = """
import atexit, json, sys
if sys.argv[1] == "python":
    sys.modules["pysqlite3"] = None
def said():
    from exporter.sqlite import sqlite3
    print(json.dumps({"driver": sqlite3.__name__, "version": sqlite3.sqlite_version,
                      "python": "_sqlite3" in sys.modules,
                      "current": "pysqlite3._sqlite3" in sys.modules}), file=sys.stderr)
atexit.register(said)
sys.argv = ["claude-code-exporter", *sys.argv[2:]]
from exporter.cli.entry import main
main()
"""


def _report(driver: str, tree: Path, state: Path, *view: str) -> tuple[str, dict[str, Any]]:
    """``report [view] --json`` through ``driver``: (its output, what the process loaded)."""
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, driver, "report", *view, "--json", "--data-dir",
         str(tree), "--state-dir", str(state)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(proc.stderr.strip().splitlines()[-1])


def test_either_driver_gives_the_same_reports_from_either_ledger(real_tree: Path,
                                                                 tmp_path: Path) -> None:
    """Cold and warm reports match across drivers, each reading the other's ledger."""
    ours, theirs = tmp_path / "default", tmp_path / "python"
    cold, _ = _report("default", real_tree, ours)
    cold_python, loaded_python = _report("python", real_tree, theirs)
    assert cold == cold_python
    assert loaded_python == {**loaded_python, "driver": "sqlite3", "python": True,
                             "current": False}
    # Each reads the ledger the other wrote (the same file format), session view too.
    assert _report("python", real_tree, ours, "session")[0] == \
        _report("default", real_tree, theirs, "session")[0]
    assert _report("default", real_tree, theirs)[0] == cold
    assert json.loads(cold)  # a report, not an empty output


def test_a_process_loads_one_sqlite_library(real_tree: Path, tmp_path: Path) -> None:
    """With the current SQLite installed, Python's own is never loaded beside it (their locks)."""
    _, loaded = _report("default", real_tree, tmp_path / "state")
    if loaded["driver"] == "sqlite3":  # no wheel for this platform: Python's own, alone
        assert loaded["python"] and not loaded["current"]
    else:
        assert loaded == {**loaded, "driver": "pysqlite3.dbapi2", "python": False,
                          "current": True}
