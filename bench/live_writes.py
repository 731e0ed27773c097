"""Bytes a running ``serve`` writes per appended line, and its WAL's size (round 3, #12).

Usage: python3 -m bench.live_writes [--lines 200] [--rate 4] [--sessions 40] [--settle 60]
                                    [--hold-reader] [--copies 1]

A generated history (``--sessions`` sessions) is ingested by a real ``serve``
on loopback with its state dir on this disk; then ``--lines`` lines are
appended to one live transcript at ``--rate`` lines a second (paced: the
rate is the workload, not a wait for a result), each shaped like a real
one (random ids, a growing context), and the run waits until
/metrics counts every one. Prints one JSON object: /proc/PID/io
``write_bytes`` (bytes the process sent towards the disk) and ``wchar``
(bytes it handed to write()) per appended line over that span, and the
largest WAL seen. ``--hold-reader``: another connection holds a read
snapshot (BEGIN + SELECT) from the first 1 % of the lines until every line is
counted, then lets go; the WAL's size 10 s later is printed too.
``--copies K``: the ingested history's requests are copied K times, 30 days
apart, before the lines come (a ledger of a year from a generated month). Run with
PYTHONPATH pointing at another checkout to measure that code instead.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import OUT
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate
from tests.support.ledgers import WalFrames, page_size
from tests.support.live import LiveSession
from tests.support.process import Serve
from tests.support.wait import poll


def _io(pid: int) -> dict[str, int]:
    """The /proc/PID/io counters of a process."""
    out = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        name, _, value = line.partition(":")
        out[name] = int(value)
    return out


def _append_one(live: Path, session: LiveSession) -> None:
    """Append the session's next request to the live transcript."""
    with live.open("ab") as fh:
        fh.write(session.line())


def _shows(serve: Serve, want: float) -> Callable[[], bool]:
    """A check: ``serve`` counts ``want`` requests."""
    return lambda: serve.requests() == want


def _measure(serve: Serve, ledger: Path, live: Path,
             args: argparse.Namespace) -> dict[str, float]:
    """Append the lines at their pace to a settled ``serve``; the figures of that span."""
    wal = ledger.with_name(ledger.name + "-wal")
    session = LiveSession()
    base = serve.requests()
    time.sleep(5)  # a quiet spell first: the start-up's own WAL is folded in before the span
    reader = sqlite3.connect(ledger, isolation_level=None)
    before, start, peak_wal, frames = _io(serve.proc.pid), time.monotonic(), 0, WalFrames(ledger)
    for i in range(args.lines):
        if args.hold_reader and i == args.lines // 100:
            # A snapshot taken while the WAL holds frames pins them (one taken on a WAL
            # folded in whole reads the file alone, and lets the writer start it again).
            poll(_shows(serve, base + i), 60, "the first lines counted")
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM requests").fetchone()
        _append_one(live, session)
        peak_wal = max(peak_wal, wal.stat().st_size if wal.exists() else 0)
        frames.look()
        time.sleep(max(0.0, start + (i + 1) / args.rate - time.monotonic()))  # the pace
    poll(lambda: serve.requests() == base + args.lines, 120, "every line counted")
    after = _io(serve.proc.pid)
    frames.look()
    peak_wal = max(peak_wal, wal.stat().st_size)
    reader.close()  # lets go (a no-op without --hold-reader)
    released = time.monotonic()
    _append_one(live, session)  # one more commit after it, as a follower makes
    time.sleep(max(0.0, released + 10 - time.monotonic()))  # the time allowed to shrink
    wal_after = wal.stat().st_size if wal.exists() else 0
    per = {k: round((after[k] - before[k]) / args.lines / 1024, 1)
           for k in ("write_bytes", "wchar")}
    return {"lines": args.lines, "rate": args.rate, "history": base,
            "write_kib_per_line": per["write_bytes"], "wchar_kib_per_line": per["wchar"],
            "wal_frame_kib_per_line": round(frames.total * (page_size(ledger) + 24)
                                            / args.lines / 1024, 1),
            "peak_wal_mib": round(peak_wal / 2**20, 2),
            "wal_10s_after_mib": round(wal_after / 2**20, 2)}


def _lengthen(ledger: Path, copies: int) -> None:
    """Add ``copies - 1`` copies of every request, each 30 days further back, new keys.

    Only the requests table and its indexes grow (where a live line's entries
    land); the sums kept beside them stay the history's own, which a live
    line's commit touches only at today's slots.
    """
    db = sqlite3.connect(ledger, isolation_level=None)
    try:
        columns = [c[1] for c in db.execute("PRAGMA table_info(requests)") if c[1] != "id"]
        last = db.execute("SELECT max(id) FROM requests").fetchone()[0]
        db.execute("BEGIN")
        for k in range(1, copies):
            shifted = {"key": f"key || '#{k}'", "ts": f"ts - {k * 30 * 86_400}",
                       "session": f"session || '#{k}'"}
            db.execute(f"INSERT INTO requests ({', '.join(columns)}) SELECT "
                       f"{', '.join(shifted.get(c, c) for c in columns)} FROM requests "
                       f"WHERE id <= {last}")
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def main() -> None:
    """Run the measurement and print it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--settle", type=float, default=60.0, help="serve's --settle-seconds")
    ap.add_argument("--hold-reader", action="store_true")
    ap.add_argument("--copies", type=int, default=1,
                    help="the ingested history's requests copied K times, 30 days apart")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="live-writes-", dir=OUT))  # on disk, not tmpfs
    try:
        generate(work / "tree", GenOptions(seed=3, sessions=args.sessions))
        data = work / "tree" / "projects"
        live = data / "live" / "live.jsonl"
        live.parent.mkdir(parents=True)
        live.touch()
        serve = Serve(data, work / "state", "--rescan-seconds", "30", logs=work,
                      settle=str(args.settle))
        if args.copies > 1:  # the history ingested; then made K times as long, offline
            serve.stop()
            _lengthen(work / "state" / "ledger.sqlite3", args.copies)
            serve = Serve(data, work / "state", "--rescan-seconds", "30", logs=work,
                          settle=str(args.settle))
        try:
            print(json.dumps(_measure(serve, work / "state" / "ledger.sqlite3", live, args)))
        finally:
            serve.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
