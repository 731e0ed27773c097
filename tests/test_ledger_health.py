"""A corrupt ledger is said so, never stamped clean, refused until rebuilt (round 3, #5)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from exporter.ingest.parse import parse_lines
from exporter.ledger.health import Health, check_in_background, corrupt_marker
from exporter.ledger.store import Ledger
from exporter.ledger.wal import broken_frame, committed_frames
from exporter.sqlite import sqlite3
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll

FAST = ("--rescan-seconds", "0.5")


def _append(path: Path, first: int, n: int) -> None:
    """Append ``n`` requests (ids from ``first``) to one transcript."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        fh.write(jsonl(*(assistant(f"m{i}", f"r{i}", ts=f"2026-10-01T12:{i // 60 % 60:02d}:"
                                   f"{i % 60:02d}.000Z") for i in range(first, first + n))))


def _flip(wal: Path, flips: int, seed: int = 5) -> None:
    """Flip ``flips`` random bytes in the WAL's frames (its 32-byte header left as it is)."""
    rng = random.Random(seed)
    with wal.open("r+b") as fh:
        size = fh.seek(0, 2)
        for _ in range(flips):
            at = rng.randrange(32, size)
            fh.seek(at)
            byte = fh.read(1)
            fh.seek(at)
            fh.write(bytes([byte[0] ^ 0xFF]))


def _run(command: str, data: Path, state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """One command of the CLI over ``data`` with ``state``."""
    return subprocess.run(
        [sys.executable, "-m", "exporter", command, *extra, "--data-dir", str(data),
         "--state-dir", str(state)], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False)


def _report(data: Path, state: Path) -> subprocess.CompletedProcess[str]:
    """``report --json``."""
    return _run("report", data, state, "--json")


def test_a_corrupt_wal_under_serve_is_reported_never_stamped_and_refused(tmp_path: Path) -> None:
    """300 byte flips in serve's WAL: 503 with the way out, no stamp, refused; rebuild works."""
    data, state = tmp_path / "projects", tmp_path / "state"
    transcript = data / "p" / "s1.jsonl"
    _append(transcript, 0, 50)
    serve = Serve(data, state, *FAST)
    try:
        _append(transcript, 50, 50)  # live commits: frames the writer has not folded in
        poll(lambda: serve.requests() == 100, 30, "100 requests counted")
        ledger = state / "ledger.sqlite3"
        wal = ledger.with_name(ledger.name + "-wal")
        assert committed_frames(ledger) > 0 and wal.stat().st_size > 32
        _flip(wal, 300)

        def unhealthy() -> dict[str, object] | None:
            status, doc = serve.health()
            return doc if status == 503 else None

        doc = poll(unhealthy, 30, "/healthz 503 for the corrupt WAL")
        assert doc["ledger_ok"] is False and "corrupt" in str(doc["error"]), doc
        assert "rebuild" in str(doc["recover"]), doc
        status, body = serve.get("/metrics")
        assert status == 200 and b"claude_code_requests" not in body  # figures withdrawn
        for path in ("/", "/api/summary.json"):  # the page's alike, with the way out
            status, body = serve.get(path)
            assert status == 503 and b"rebuild" in body, (path, status)
        _append(transcript, 100, 5)  # ingestion has stopped: nothing is written to it
    finally:
        assert serve.stop() == 0
    errors = [e for e in serve.events() if e.get("level") == "error"]
    assert [e["event"] for e in errors] == ["ledger_corrupt"], errors
    assert "claude-code-exporter rebuild" in errors[0]["detail"]
    assert not ledger.with_name(ledger.name + ".clean").exists()
    assert corrupt_marker(ledger).exists()
    refused = _report(data, state)
    assert refused.returncode == 3 and "rebuild" in refused.stderr, refused.stderr[-2000:]
    rebuilt = _run("rebuild", data, state)
    assert rebuilt.returncode == 0 and "105 requests" in rebuilt.stderr, rebuilt.stderr[-2000:]
    aside = [p for p in state.iterdir() if p.name.startswith("ledger.sqlite3.corrupt-")]
    assert len(aside) == 1 and (aside[0] / "ledger.sqlite3").exists()  # kept, not deleted
    report = _report(data, state)
    assert report.returncode == 0, report.stderr[-2000:]
    assert json.loads(report.stdout)["totals"]["requests"] == 105


def test_a_damaged_wal_frame_is_found_and_a_sound_one_passes(tmp_path: Path) -> None:
    """The WAL's checksum chain holds for SQLite's own frames and breaks at a flipped byte."""
    path = tmp_path / "l.db"
    ledger = Ledger(path)
    ledger.live()  # no automatic fold-in: the frames stay in the WAL
    ledger.apply(parse_lines(jsonl(*(assistant(f"m{i}", f"r{i}") for i in range(40)))), [], 0)
    frames = committed_frames(path)
    assert frames > 0 and broken_frame(path, frames) is None
    _flip(path.with_name(path.name + "-wal"), 1, seed=3)
    assert "checksum" in str(broken_frame(path, frames))
    ledger.close()
    assert ledger.health.corrupt is not None
    assert not path.with_name(path.name + ".clean").exists()


def test_a_large_unverified_ledger_is_checked_beside_serving(tmp_path: Path) -> None:
    """Left unchecked at open, the ledger is read whole on a thread; corruption marks it."""
    path = tmp_path / "l.db"
    ledger = Ledger(path)
    ledger.apply(parse_lines(jsonl(*(assistant(f"m{i}", f"r{i}") for i in range(600)))), [], 0)
    ledger.close()
    path.with_name(path.name + ".clean").unlink()  # as after a kill -9
    opened = Ledger(path, check_above=0)
    assert not opened.health.verified
    check_in_background(opened.health).join(30)
    assert opened.health.verified and opened.health.corrupt is None
    opened.close()
    db = sqlite3.connect(path)  # break the index of the keys: the rows no longer match it
    db.execute("PRAGMA writable_schema = ON")
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'requests_ts'").fetchone()
    db.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = 'requests_key'", root)
    db.commit()
    db.close()
    health = Health(path)
    check_in_background(health).join(30)
    assert health.corrupt is not None and not health.verified
    assert corrupt_marker(path).exists()


def test_a_mark_left_by_a_reader_beside_is_taken_up_by_serve(tmp_path: Path) -> None:
    """A report that met corruption beside serve marked it: serve's next turn says so too."""
    from tests.support.daemon import Driven

    driven = Driven(tmp_path)
    try:
        driven.daemon.follower.step(driven.daemon.stop_event)
        assert driven.daemon.health()[0]
        Health(driven.daemon.parts.ledger_path).mark("database disk image is malformed")
        driven.daemon.follower.step(driven.daemon.stop_event)
        ok, detail = driven.daemon.health()
        assert not ok and "malformed" in str(detail["error"]) and "recover" in detail
        assert driven.log.at("error") == ["ledger_corrupt"]
    finally:
        driven.daemon.close()
    assert not driven.daemon.parts.ledger_path.with_name("ledger.sqlite3.clean").exists()


def test_rebuild_refuses_a_sound_ledger(tmp_path: Path) -> None:
    """A rebuild of a ledger neither marked nor failing its check: exit 3, nothing moved."""
    data, state = tmp_path / "projects", tmp_path / "state"
    _append(data / "p" / "s1.jsonl", 0, 5)
    assert _report(data, state).returncode == 0
    before = sorted(p.name for p in state.iterdir())
    refused = _run("rebuild", data, state)
    assert refused.returncode == 3 and "nothing to rebuild" in refused.stderr, refused.stderr
    assert sorted(p.name for p in state.iterdir()) == before
