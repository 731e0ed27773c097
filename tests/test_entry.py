"""The console script's entry point: what it freezes for the collector, what it imports, SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.records import assistant, jsonl

ROOT = Path(__file__).resolve().parents[1]

# Run as the console script does (exporter.cli.entry.main() with sys.argv); an atexit handler,
# run as the process exits, tells where pydantic's settings model is: a class the collector
# tracks, or frozen (absent from gc.get_objects).
_SCRIPT = """
import atexit, gc, sys
def where():
    model = sys.modules.get("exporter.cli.config")
    if model is None:
        print("cli-not-imported", file=sys.stderr)
    else:
        tracked = any(o is model.Settings for o in gc.get_objects())
        print("tracked" if tracked else "frozen", file=sys.stderr)
atexit.register(where)
sys.argv = ["claude-code-exporter", *sys.argv[1:]]
from exporter.cli.entry import main
main()
"""


def _run(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> str:
    """Run the console script's entry with ``args``; what the atexit handler said."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, *args], input=stdin,
                          capture_output=True, env=environ, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stderr.decode().strip().splitlines()[-1]


def _tree(tmp_path: Path) -> Path:
    """A transcript tree of one request under ``tmp_path``."""
    session = tmp_path / "tree" / "projects" / "p" / "s.jsonl"
    session.parent.mkdir(parents=True)
    session.write_bytes(jsonl(assistant()))
    return tmp_path / "tree"


def test_console_script_freezes_the_cli_modules(tmp_path: Path) -> None:
    """A report through the console script runs with pydantic's model frozen, not tracked."""
    said = _run("report", "--json", "--data-dir", str(_tree(tmp_path)), "--state-dir",
                str(tmp_path / "state"))
    assert said == "frozen"


def test_console_script_statusline_imports_no_cli(tmp_path: Path) -> None:
    """The status line through the console script still skips the CLI's imports."""
    said = _run("statusline", stdin=b"{}",
                env={"CLAUDE_CODE_EXPORTER_STATE_DIR": str(tmp_path)})
    assert said == "cli-not-imported"


# At exit, what SQLite the command ran with: a new connection (through the library the
# program's driver uses) says whether allocations are counted and connections locked.
_SQLITE_STATE = """
import atexit, ctypes, sys
def state():
    from exporter.sqlite import LIBRARY
    lib = ctypes.CDLL(LIBRARY)
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    lib.sqlite3_db_mutex.restype = ctypes.c_void_p
    db = ctypes.c_void_p()
    lib.sqlite3_open_v2(b":memory:", ctypes.byref(db), 6, None)  # READWRITE | CREATE
    lib.sqlite3_exec(db, b"CREATE TABLE t (x); INSERT INTO t VALUES (randomblob(65536))",
                     None, None, None)
    counted = lib.sqlite3_memory_used() > 0
    locked = lib.sqlite3_db_mutex(db) is not None
    lib.sqlite3_close(db)
    print(f"counted={counted} locked={locked}", file=sys.stderr)
atexit.register(state)
sys.argv = ["claude-code-exporter", *sys.argv[1:]]
from exporter.cli.entry import main
main()
"""


def _sqlite_state(*args: str) -> str:
    """Run the console script's entry with ``args``; how SQLite was set up for it."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _SQLITE_STATE, *args], capture_output=True,
                          env=environ, timeout=60, check=False)
    return proc.stderr.decode().strip().splitlines()[-1]


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="SQLite is tuned on Linux only")


@linux_only
def test_report_runs_sqlite_without_statistics_or_connection_locks(tmp_path: Path) -> None:
    """A report counts no allocations and locks no connection (each has one thread)."""
    said = _sqlite_state("report", "--json", "--data-dir", str(_tree(tmp_path)), "--state-dir",
                         str(tmp_path / "state"))
    assert said == "counted=False locked=False"


@linux_only
def test_serve_keeps_sqlite_connection_locks() -> None:
    """Any other command (serve shares its ledger between threads) keeps the locks."""
    assert _sqlite_state("serve", "--help") == "counted=False locked=True"


@linux_only
def test_tune_sqlite_fails_safely_once_a_connection_is_open(tmp_path: Path) -> None:
    """With a connection open, SQLite cannot be shut down: nothing changes, and it says so."""
    script = ("from exporter.sqlite import sqlite3\nfrom exporter.cli.startup import tune_sqlite\n"
              "db = sqlite3.connect(':memory:')\ndb.execute('SELECT 1')\n"
              "print(tune_sqlite(one_thread_each=True))\n"
              "print(db.execute('SELECT 2').fetchone()[0])\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60, check=True)
    assert proc.stdout.split() == ["False", "2"]


def test_tune_sqlite_leaves_a_driver_without_a_library_file_alone() -> None:
    """A driver built into the interpreter (no file to load) is left as it is."""
    from exporter.cli.startup import tune_sqlite

    assert tune_sqlite(one_thread_each=True, library="") is False


# A module-level object whose finalizer speaks at the interpreter's teardown, an atexit
# handler that speaks before it, and some output: then startup.finish with the given code.
_FINISH = """
import atexit, os, sys
class Speaks:
    def __del__(self, write=os.write):
        write(2, b"teardown\\n")
keep = Speaks()
atexit.register(lambda: sys.stderr.write("atexit\\n"))
sys.stdout.write("the whole output")
from exporter.cli.startup import finish
finish(int(sys.argv[1]))
"""


@pytest.mark.parametrize(("code", "teardown"), [(0, False), (1, True)])
def test_finish_skips_the_teardown_only_after_a_success(code: int, teardown: bool) -> None:
    """After a success the teardown is skipped, yet atexit runs and the output is flushed."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _FINISH, str(code)], capture_output=True,
                          env=environ, timeout=60, check=False)
    assert proc.returncode == code
    assert proc.stdout == b"the whole output"
    said = proc.stderr.decode().splitlines()
    assert "atexit" in said
    assert ("teardown" in said) is teardown
