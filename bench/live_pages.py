"""Which b-trees a live commit writes: WAL frames mapped to tables and indexes.

Usage: python3 -m bench.live_pages [--lines 40] [--every 1.0] [--history 20]

An in-process daemon over a generated history (``--history`` sessions) and one
live transcript (tests.support.daemon.Driven, an injected clock) is stepped as
real-shaped lines (tests.support.live) arrive ``--every`` seconds apart; after
each step the new WAL frames' page numbers are read from the WAL file and
named through SQLite's ``dbstat`` on a copy of the ledger (Python's own sqlite3
module, whose SQLite has it; ours is used for nothing here). Prints, per
commit, how many frames it wrote per b-tree, then how many commits touched
each b-tree.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3 as with_dbstat  # only to read dbstat of a copy; the product never does
import struct
import tempfile
from collections import Counter
from pathlib import Path

from tests.support.daemon import Driven
from tests.support.live import LiveSession


def frames(wal: Path, start: int) -> tuple[list[int], int]:
    """Page numbers of the WAL's frames from byte ``start`` on, and where they end."""
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < 32:
        return [], 32
    page = struct.unpack(">I", data[8:12])[0]
    pos, out = max(start, 32), []
    while pos + 24 + page <= len(data):
        out.append(struct.unpack(">I", data[pos:pos + 4])[0])
        pos += 24 + page
    return out, pos


def names(ledger: Path) -> dict[int, str]:
    """Page number → the table or index it belongs to, in a copy of the ledger and its WAL."""
    copy = Path(tempfile.mkdtemp(prefix="live-pages-"))
    try:
        for suffix in ("", "-wal"):
            if Path(f"{ledger}{suffix}").exists():
                shutil.copy(f"{ledger}{suffix}", copy / f"{ledger.name}{suffix}")
        db = with_dbstat.connect(copy / ledger.name)
        try:
            return {page: name for name, page in db.execute("SELECT name, pageno FROM dbstat")}
        finally:
            db.close()
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def main() -> None:
    """Step the daemon line by line and print the b-trees each commit wrote."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=40)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("--history", type=int, default=20, help="generated sessions before")
    args = ap.parse_args()
    d = Driven(Path(tempfile.mkdtemp(prefix="live-pages-")), history=args.history)
    live = LiveSession()
    try:
        wal = Path(f"{d.daemon.parts.ledger_path}-wal")
        d.step()
        _, pos = frames(wal, 0)
        touched: Counter[str] = Counter()
        for i in range(args.lines):
            d.append_live(live)
            d.daemon.follower.wake([str(d.session)])
            d.step()
            d.mono.advance(args.every)
            d.clock.advance(args.every)
            new, end = frames(wal, pos)
            if end < pos:  # folded in: the WAL started again
                new, end = frames(wal, 0)
            pos = end
            if new:
                named = names(d.daemon.parts.ledger_path)
                per = Counter(named.get(p, f"page {p}") for p in new)
                print(f"line {i}: {len(new)} frames:", dict(sorted(per.items())))
                touched.update(set(per))
        print("commits touching each b-tree:", dict(touched.most_common()))
    finally:
        d.daemon.close()


if __name__ == "__main__":
    main()
