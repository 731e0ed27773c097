"""Bytes a running ``serve`` writes per appended line, and its WAL's size (round 3, #12).

Usage: python3 -m bench.live_writes [--lines 200] [--rate 4] [--sessions 40] [--settle 60]
                                    [--hold-reader]

A generated history (``--sessions`` sessions) is ingested by a real ``serve``
on loopback with its state dir on this disk; then ``--lines`` lines are
appended to one live transcript at ``--rate`` lines a second (paced: the
rate is the workload, not a wait for a result), and the run waits until
/metrics counts every one. Prints one JSON object: /proc/PID/io
``write_bytes`` (bytes the process sent towards the disk) and ``wchar``
(bytes it handed to write()) per appended line over that span, and the
largest WAL seen. ``--hold-reader``: another connection holds a read
snapshot (BEGIN + SELECT) from the first 1 % of the lines until every line is
counted, then lets go; the WAL's size 10 s later is printed too. Run with
PYTHONPATH pointing at another checkout to measure that code instead.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.common import OUT
from exporter.ledger.wal import committed_frames
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll


def _io(pid: int) -> dict[str, int]:
    """The /proc/PID/io counters of a process."""
    out = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        name, _, value = line.partition(":")
        out[name] = int(value)
    return out


def _append_one(live: Path, i: int) -> None:
    """Append request ``i`` to the live transcript, timed now."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    with live.open("ab") as fh:
        fh.write(jsonl(assistant(f"live{i}", f"rlive{i}", ts=now, session="live")))


class _Frames:
    """WAL frames committed over a span, across the WAL's restarts (each fold-in's)."""

    def __init__(self, ledger: Path) -> None:
        self.ledger, self.total, self._last = ledger, 0, committed_frames(ledger)

    def look(self) -> None:
        """Count the frames committed since the last look."""
        now = committed_frames(self.ledger)
        self.total += now - self._last if now >= self._last else now
        self._last = now


def _shows(serve: Serve, want: float) -> Callable[[], bool]:
    """A check: ``serve`` counts ``want`` requests."""
    return lambda: serve.requests() == want


def _measure(serve: Serve, ledger: Path, live: Path,
             args: argparse.Namespace) -> dict[str, float]:
    """Append the lines at their pace to a settled ``serve``; the figures of that span."""
    wal = ledger.with_name(ledger.name + "-wal")
    base = serve.requests()
    time.sleep(5)  # a quiet spell first: the start-up's own WAL is folded in before the span
    reader = sqlite3.connect(ledger, isolation_level=None)
    before, start, peak_wal, frames = _io(serve.proc.pid), time.monotonic(), 0, _Frames(ledger)
    for i in range(args.lines):
        if args.hold_reader and i == args.lines // 100:
            # A snapshot taken while the WAL holds frames pins them (one taken on a WAL
            # folded in whole reads the file alone, and lets the writer start it again).
            poll(_shows(serve, base + i), 60, "the first lines counted")
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM requests").fetchone()
        _append_one(live, i)
        peak_wal = max(peak_wal, wal.stat().st_size if wal.exists() else 0)
        frames.look()
        time.sleep(max(0.0, start + (i + 1) / args.rate - time.monotonic()))  # the pace
    poll(lambda: serve.requests() == base + args.lines, 120, "every line counted")
    after = _io(serve.proc.pid)
    frames.look()
    peak_wal = max(peak_wal, wal.stat().st_size)
    reader.close()  # lets go (a no-op without --hold-reader)
    released = time.monotonic()
    _append_one(live, args.lines)  # one more commit after it, as a follower makes
    time.sleep(max(0.0, released + 10 - time.monotonic()))  # the time allowed to shrink
    wal_after = wal.stat().st_size if wal.exists() else 0
    per = {k: round((after[k] - before[k]) / args.lines / 1024, 1)
           for k in ("write_bytes", "wchar")}
    return {"lines": args.lines, "rate": args.rate, "history": base,
            "write_kib_per_line": per["write_bytes"], "wchar_kib_per_line": per["wchar"],
            "wal_frame_kib_per_line": round(frames.total * 16408 / args.lines / 1024, 1),
            "peak_wal_mib": round(peak_wal / 2**20, 2),
            "wal_10s_after_mib": round(wal_after / 2**20, 2)}


def main() -> None:
    """Run the measurement and print it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--settle", type=float, default=60.0, help="serve's --settle-seconds")
    ap.add_argument("--hold-reader", action="store_true")
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
        try:
            print(json.dumps(_measure(serve, work / "state" / "ledger.sqlite3", live, args)))
        finally:
            serve.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
