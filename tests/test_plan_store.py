"""Spool → ledger: every sample exactly once, whatever the order, repeats, crashes or rotation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.ingest import spool
from exporter.ledger import plan_store as store
from exporter.ledger.plan_store import ingest_samples
from exporter.ledger.store import Ledger
from exporter.projections.plan.windows import limits_rows, plan_figures, window_history
from exporter.sqlite import sqlite3
from tests.support.paths import ROOT

T0 = 1_790_000_000.0


def sample(i: int, *, t: float | None = None, five: float = 10.0, session: str = "s1",
           resets: int = 1_790_018_000) -> dict[str, Any]:
    """A spool sample record; ``i`` makes it distinct (the session cost)."""
    payload = {
        "session_id": session, "model": {"id": "claude-opus-4-6"}, "version": "2.1.90",
        "rate_limits": {"five_hour": {"used_percentage": five, "resets_at": resets},
                        "seven_day": {"used_percentage": 3.0, "resets_at": resets + 400_000}},
        "context_window": {"used_percentage": 20 + i % 50, "context_window_size": 200_000},
        "cost": {"total_cost_usd": i / 100},
    }
    return spool.sample_record(payload, T0 + i if t is None else t)


@pytest.fixture
def ledger(tmp_path: Path) -> Any:
    """A real ledger in tmp_path (the state dir: the spool lives next to it)."""
    led = Ledger(tmp_path / "ledger.sqlite3")
    yield led
    led.close()


def count(conn: sqlite3.Connection, table: str) -> int:
    """Rows in a table."""
    n: int = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return n


def test_ingest_is_idempotent_and_offsets_commit(ledger: Ledger, tmp_path: Path) -> None:
    """Ingesting twice stores each sample once; the second pass reads no byte."""
    spool.append(str(tmp_path), [sample(i) for i in range(50)])
    first = ingest_samples(ledger._db)
    assert (first.new, first.repeated) == (50, 0)
    assert first.bytes_read == (tmp_path / spool.SPOOL_NAME).stat().st_size
    second = ingest_samples(ledger._db)
    assert (second.new, second.bytes_read) == (0, 0)
    assert count(ledger._db, "plan_samples") == 50
    assert plan_figures(ledger._db, T0 + 100).samples == 50


def test_same_payload_twice_is_one_sample_with_first_and_last_seen(
    ledger: Ledger, tmp_path: Path
) -> None:
    """A refresh repeating the figures is the same sample; its time span grows."""
    spool.append(str(tmp_path), [sample(1, t=T0 + 5), sample(1, t=T0 + 1), sample(1, t=T0 + 9)])
    got = ingest_samples(ledger._db)
    assert (got.new, got.repeated) == (1, 2)
    assert ledger._db.execute("SELECT first_seen, last_seen FROM plan_samples").fetchall() == [
        (T0 + 1, T0 + 9)
    ]
    assert plan_figures(ledger._db, T0 + 10).sample_age_seconds == pytest.approx(1.0)


def test_order_does_not_matter(tmp_path: Path) -> None:
    """The same records in two orders give the same tables."""
    records = [sample(i, five=10 + i // 10, t=T0 + (i * 37) % 100) for i in range(100)]
    dumps = []
    for name, order in (("a", records), ("b", records[::-1])):
        state = tmp_path / name
        spool.append(str(state), order)
        led = Ledger(state / "ledger.sqlite3")
        ingest_samples(led._db)
        dumps.append([
            led._db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
            for t in ("plan_samples", "plan_levels", "plan_windows", "plan_meta")
        ])
        led.close()
    assert dumps[0] == dumps[1]


def test_inside_the_callers_transaction_rollback_leaves_nothing(
    ledger: Ledger, tmp_path: Path
) -> None:
    """In the ledger's write path: a rolled-back batch rolls back the samples AND the offset."""
    spool.append(str(tmp_path), [sample(i) for i in range(10)])
    db = ledger._db
    db.execute("BEGIN IMMEDIATE")
    assert ingest_samples(db).new == 10
    assert db.in_transaction  # it did not commit the caller's transaction
    db.execute("ROLLBACK")
    assert store.has_schema(db) is False
    again = ingest_samples(db)
    assert again.new == 10 and count(db, "plan_samples") == 10


_KILLED_INGEST = """
import signal, sys
from pathlib import Path
from exporter.ledger.store import Ledger
from exporter.ledger.plan_store import ingest_samples
led = Ledger(Path(sys.argv[1]))
led._db.execute("BEGIN IMMEDIATE")
ingest_samples(led._db)
print("ingested", flush=True)
signal.pause()  # hold the open transaction until the test's SIGKILL
"""


def test_kill_9_mid_transaction_loses_nothing_and_doubles_nothing(
    ledger: Ledger, tmp_path: Path
) -> None:
    """A process killed with the batch read but not committed: the next ingest stores it once."""
    spool.append(str(tmp_path), [sample(i) for i in range(200)])
    spool.append(str(tmp_path), [spool.failure_record("not_json", T0)])
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_INGEST, str(tmp_path / "ledger.sqlite3")],
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ingested\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    got = ingest_samples(ledger._db)
    assert (got.new, got.failures) == (200, {"not_json": 1})
    assert ingest_samples(ledger._db).new == 0
    assert plan_figures(ledger._db, T0).failures["not_json"] == 1


def test_concurrent_writers_never_tear_lines(ledger: Ledger, tmp_path: Path) -> None:
    """Eight threads appending 250 records each: 2000 samples, no rejected line."""

    def write(k: int) -> None:
        for i in range(250):
            spool.append(str(tmp_path), [sample(k * 1000 + i)])

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    got = ingest_samples(ledger._db)
    assert (got.new, got.rejected) == (2000, {})


def test_torn_and_foreign_lines_are_counted_not_fatal(ledger: Ledger, tmp_path: Path) -> None:
    """Garbage, an unknown version, a bad field, an overlong line: counted, the rest ingested."""
    path = tmp_path / spool.SPOOL_NAME
    good = spool.encode(sample(1))
    bad_field = spool.encode({**sample(2), "windows": {"five_hour": ["x", 1]}})
    other_version = spool.encode({**sample(3), "v": 2})
    path.write_bytes(b"garbage\n" + good + b"x" * (spool.MAX_LINE + 10) + b"\n" + bad_field
                     + other_version + b"\n" + spool.encode(sample(4)) + b'{"v":1,"t":')
    got = ingest_samples(ledger._db)
    assert got.new == 2
    assert got.rejected == {"not_json": 1, "too_long": 1, "bad_record": 2}
    # The torn last line waits for its end; a full disk never finishes it, and the next
    # record glued to it is rejected as one bad line.
    spool.append(str(tmp_path), [sample(5)])
    again = ingest_samples(ledger._db)
    assert (again.new, again.rejected) == (0, {"not_json": 1})
    figures = plan_figures(ledger._db, T0)
    assert figures.rejected == {**dict.fromkeys(store.REJECT_REASONS, 0), "too_long": 1,
                                "not_json": 2, "bad_record": 2}


def test_rotation_keeps_every_sample_once(ledger: Ledger, tmp_path: Path) -> None:
    """Past 1 MiB the read spool is renamed, read to its end, deleted once idle: all once.

    A writer that opened the old name before the rename is still read.
    """
    state = str(tmp_path)
    n = 0
    while n == 0 or (tmp_path / spool.SPOOL_NAME).stat().st_size < store.ROTATE_BYTES:
        spool.append(state, [sample(i) for i in range(n, n + 500)])
        n += 500
    assert ingest_samples(ledger._db).new == n
    assert ingest_samples(ledger._db).new == 0  # this pass rotates
    retired = tmp_path / spool.RETIRED_NAME
    assert retired.exists() and not (tmp_path / spool.SPOOL_NAME).exists()
    # A writer that opened the old name before the rename appends to the retired file.
    with retired.open("ab") as fh:
        fh.write(spool.encode(sample(n)))
    spool.append(state, [sample(n + 1)])
    assert ingest_samples(ledger._db).new == 2
    assert retired.exists()  # touched less than a minute ago
    later = ingest_samples(ledger._db, clock=lambda: time.time() + store.RETIRED_GRACE_S + 1)
    assert later.new == 0 and not retired.exists()
    assert count(ledger._db, "plan_samples") == n + 2
    assert count(ledger._db, "plan_spool") == 1  # the deleted file's offset is forgotten


def test_replaced_spool_is_read_from_the_start(ledger: Ledger, tmp_path: Path) -> None:
    """A spool deleted and recreated (even on the same inode) is recognised by its first bytes."""
    spool.append(str(tmp_path), [sample(i) for i in range(20)])
    ingest_samples(ledger._db)
    path = tmp_path / spool.SPOOL_NAME
    path.unlink()
    spool.append(str(tmp_path), [sample(100 + i) for i in range(3)])
    assert ingest_samples(ledger._db).new == 3
    assert count(ledger._db, "plan_samples") == 23


def test_spool_dir_defaults_to_the_ledger_directory(tmp_path: Path) -> None:
    """An in-memory connection has no directory: the spool must be named."""
    spool.append(str(tmp_path), [sample(1)])
    mem = sqlite3.connect(":memory:", isolation_level=None)
    with pytest.raises(ValueError, match="spool_dir"):
        ingest_samples(mem)
    assert not mem.in_transaction
    assert ingest_samples(mem, tmp_path).new == 1


def test_figures_follow_windows_resets_and_context(ledger: Ledger, tmp_path: Path) -> None:
    """Used ratio is the window's highest figure, 0 after its reset; exhausted windows count."""
    r1, r2 = 1_790_018_000, 1_790_018_600  # resets within 5 h of their samples
    records = [
        sample(1, t=T0 + 10, five=40.0, resets=r1),
        sample(2, t=T0 + 20, five=100.0, resets=r1 + 1),  # jitter: the same instance
        sample(3, t=T0 + 30, five=55.0, resets=r1, session="stale"),  # an older figure, later
        sample(4, t=T0 + 40, five=2.0, resets=r2),
    ]
    spool.append(str(tmp_path), records[:3])
    ingest_samples(ledger._db)
    fig = plan_figures(ledger._db, T0 + 50)
    five = fig.windows["five_hour"]
    assert (five.used_ratio, five.resets_at, five.exhausted) == (1.0, r1 + 1, 1)
    assert fig.context_used_ratio == pytest.approx(0.23)  # the newest refresh's context
    assert plan_figures(ledger._db, r1 + 5).windows["five_hour"].used_ratio == 0.0
    spool.append(str(tmp_path), records[3:])
    ingest_samples(ledger._db)
    five = plan_figures(ledger._db, T0 + 50).windows["five_hour"]
    assert (five.used_ratio, five.resets_at, five.exhausted) == (0.02, r2, 1)
    assert json.loads(ledger._db.execute(
        "SELECT windows FROM plan_samples WHERE session_cost_usd = 0.04").fetchone()[0]
    )["five_hour"] == [2.0, r2]


def test_figures_without_plan_tables_are_empty(ledger: Ledger) -> None:
    """A ledger the status line never fed: no windows, no age, zeroed failure counters."""
    fig = plan_figures(ledger._db, T0)
    assert fig.windows == {} and fig.sample_age_seconds is None and fig.samples == 0
    assert set(fig.failures) == set(spool.FAILURE_REASONS)
    assert not store.has_schema(ledger._db)


def test_history_and_report_rows(ledger: Ledger, tmp_path: Path) -> None:
    """The sample history (for backfill) in time order; one report row per window."""
    spool.append(str(tmp_path), [sample(2, t=T0 + 20, five=12.0), sample(1, t=T0 + 10)])
    ingest_samples(ledger._db)
    history = window_history(ledger._db, T0, T0 + 15)
    assert history == [(T0 + 10, "five_hour", 10.0, 1_790_018_000),
                       (T0 + 10, "seven_day", 3.0, 1_790_418_000)]
    assert len(window_history(ledger._db, T0, T0 + 30)) == 4
    rows = limits_rows(plan_figures(ledger._db, T0 + 30, lambda a, b: 0.0), T0 + 30)
    five = next(r for r in rows if r["window"] == "five_hour")
    assert five == {"window": "five_hour", "used_percent": 12.0,
                    "resets_in_seconds": 1_790_018_000 - (T0 + 30), "windows_exhausted": 0,
                    "usd_per_percent": None, "window_usd": None, "pairs": 0}
