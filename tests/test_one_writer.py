"""One writer per state dir; report beside serve; safe creation; private files (issue 13)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporter.ledger.access import open_ledger
from exporter.ledger.lock import LedgerBusyError, WriterLock
from exporter.ledger.opening import SCHEMA_VERSION
from exporter.ledger.store import Ledger
from exporter.synth import GenOptions, generate
from tests.support.exposition import total
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll

LEDGER = "ledger.sqlite3"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line as a process."""
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_second_serve_exits_naming_the_first(tmp_path: Path) -> None:
    """A second serve on the same state dir exits 3, naming the PID that holds it."""
    generate(tmp_path / "tree", GenOptions(seed=3, sessions=2, requests_per_session=20))
    first = Serve(tmp_path / "tree", tmp_path / "state")
    try:
        second = cli("serve", "--data-dir", str(tmp_path / "tree"), "--state-dir",
                     str(tmp_path / "state"), "--listen", "127.0.0.1:0")
        assert second.returncode == 3, second.stderr
        assert f"serve (pid {first.proc.pid}) already writes the ledger" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.proc.poll() is None  # the first one is untouched and still serving
    finally:
        assert first.stop() == 0
    again = Serve(tmp_path / "tree", tmp_path / "state")  # the lock died with its holder
    assert again.stop() == 0


def test_report_beside_serve_shows_what_serve_has_and_serve_what_report_saw(
    tmp_path: Path,
) -> None:
    """Report reads serve's ledger without ingesting; both agree without a restart."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    truth = generate(tree, GenOptions(seed=5, sessions=3, requests_per_session=30))
    serve = Serve(tree, state)
    try:
        want = truth["totals"]["requests"]
        poll(lambda: total(serve.scrape(), "claude_code_requests") == want, 30, "ingested")
        new = tree / "projects" / "-home-u-late" / "late.jsonl"
        new.parent.mkdir()
        new.write_bytes(jsonl(*(assistant(f"late{i}", ts="2026-10-05T10:00:00.000Z",
                                          session="late") for i in range(7))))
        poll(lambda: total(serve.scrape(), "claude_code_requests") == want + 7, 30, "new file")
        rep = cli("report", "--json", "--data-dir", str(tree), "--state-dir", str(state))
        assert rep.returncode == 0, rep.stderr
        assert f"serve (pid {serve.proc.pid}) is following" in rep.stderr
        assert json.loads(rep.stdout)["totals"]["requests"] == want + 7
        scraped = serve.scrape()
        assert total(scraped, "claude_code_requests") == want + 7
        lines = total(scraped, "claude_code_exporter_lines", result="usage")
        assert lines == want + 7  # report read no line: nothing counted twice
    finally:
        assert serve.stop() == 0


def _hold(path: str, role: str, ready: Any, done: Any) -> None:
    """Child: hold the writer lock as ``role`` until told to let go."""
    Ledger(Path(path)).close()
    lock = WriterLock.acquire(Path(path), role)
    ready.set()
    done.wait(timeout=60)
    lock.release()


@pytest.mark.parametrize("role", ["report", "serve"])
def test_a_writer_waits_for_a_report_and_reads_beside_a_serve(tmp_path: Path, role: str) -> None:
    """Beside another report a writer waits (then writes); beside a serve it only reads."""
    ctx = multiprocessing.get_context("fork")
    path = tmp_path / LEDGER
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(str(path), role, ready, done))
    child.start()
    try:
        assert ready.wait(timeout=30)
        if role == "report":
            with pytest.raises(LedgerBusyError, match=rf"report \(pid {child.pid}\)"):
                open_ledger(path, "report", wait=0.3)
        else:
            reader = open_ledger(path, "backfill", wait=0.3)
            assert reader.readonly and reader.holder and reader.holder.pid == child.pid
            assert reader.count() == 0 and reader.settle().hists == []
            reader.close()
    finally:
        done.set()
        child.join(timeout=30)
    writer = open_ledger(path, "report", wait=5)
    assert not writer.readonly
    writer.close()


def _create(path: str, barrier: Any) -> None:
    """Child: open a fresh ledger at the same moment as its twin."""
    barrier.wait(timeout=30)
    try:
        Ledger(Path(path)).close()
    except Exception:  # any failure is the finding
        os._exit(3)
    os._exit(0)


def test_two_processes_creating_a_fresh_ledger_at_once_both_succeed(tmp_path: Path) -> None:
    """Twenty races between two creators of one new ledger: no failure, a valid v2 file."""
    ctx = multiprocessing.get_context("fork")
    for trial in range(20):
        path = tmp_path / f"t{trial}" / LEDGER
        barrier = ctx.Barrier(2)
        procs = [ctx.Process(target=_create, args=(str(path), barrier)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
        assert [p.exitcode for p in procs] == [0, 0], trial
        ledger = Ledger(path)
        assert ledger.read("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        ledger.close()


CRASH = """
import os, sys
from exporter.sqlite import sqlite3
from pathlib import Path
real = sqlite3.connect
def crashing(*a, **k):
    con = real(*a, **k)
    steps = [0]
    def tick():
        steps[0] += 1
        if steps[0] >= int(sys.argv[2]):
            os._exit(9)  # as kill -9: no cleanup, no rollback
        return 0
    con.set_progress_handler(tick, 1)
    return con
sqlite3.connect = crashing
from exporter.ledger.store import Ledger
Ledger(Path(sys.argv[1]))
"""


def test_a_creator_killed_at_any_step_leaves_a_usable_ledger(tmp_path: Path) -> None:
    """Killed at any point while creating the schema, the next open works (not refused)."""
    kills = 0
    for step in (1, 5, 20, 60, 150, 400, 1000, 3000, 8000):
        path = tmp_path / f"s{step}" / LEDGER
        proc = subprocess.run([sys.executable, "-c", CRASH, str(path), str(step)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
                              check=False, capture_output=True)
        kills += proc.returncode == 9
        ledger = Ledger(path)
        assert ledger.read("PRAGMA user_version") == [(SCHEMA_VERSION,)] and ledger.count() == 0
        ledger.close()
    assert kills >= 5  # most steps fell inside the creation


def test_a_v1_ledger_killed_before_its_application_id_is_adopted(tmp_path: Path) -> None:
    """v1 tables without the application id (a v1 creator killed there) are ours: migrated."""
    import shutil

    from exporter.sqlite import sqlite3

    path = tmp_path / LEDGER
    shutil.copy(Path(__file__).parent / "golden" / "ledger_v1.sqlite3", path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA application_id = 0")
    con.execute("PRAGMA user_version = 0")
    con.close()
    ledger = Ledger(path)
    assert ledger.read("PRAGMA application_id") != [(0,)] and ledger.count() == 159


def test_existing_lax_state_dir_and_ledger_are_tightened(tmp_path: Path) -> None:
    """A 0755 state dir and a 0644 ledger from an older build become 0700 and 0600."""
    state = tmp_path / "state"
    Ledger(state / LEDGER).close()
    state.chmod(0o755)
    (state / LEDGER).chmod(0o644)
    Ledger(state / LEDGER).close()
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / LEDGER).stat().st_mode & 0o777 == 0o600
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky and shared by design (like /tmp): left alone
    Ledger(shared / LEDGER).close()
    assert shared.stat().st_mode & 0o7777 == 0o1777
