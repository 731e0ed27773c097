"""Disk bytes of one fold of waiting rows into the value indexes, per row folded (round 3, #12).

Usage: python3 -m bench.fold_writes LEDGER [--rows 2048]

A copy of LEDGER (a built ledger, e.g. a month copied 12 times by
``bench.report_views --year 12``'s ``replicate``) has its newest ``--rows``
rows taken out of the value indexes, as a live ``serve`` leaves them
(exporter.ledger.unindexed), and folded in. Prints one JSON object: the
fold's ``write_bytes`` (/proc/self/io: the WAL frames, then the checkpoint's
copies into the file) per row folded, and the index pages it wrote. This is
the share of a fold in each live line's cost, which ``bench.live_writes``
(150 lines, no fold) does not see.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from exporter.ledger.unindexed import FOLD_ROWS, fold
from exporter.ledger.wal import committed_frames
from exporter.sqlite import sqlite3


def _written() -> int:
    """The write_bytes of this process so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split(":")[1])
    raise RuntimeError("no write_bytes in /proc/self/io")


def _drop_caches() -> None:
    """Write everything out and empty the page cache (root), as after a reboot.

    The copy's pages sit in the cache as large folios (it was written whole); a
    small write into one then counts, and goes to disk, as the whole folio (~44
    KiB a 4 KiB page here), which a ledger read page by page does not pay.
    """
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        print("(not root: the page cache kept; the figure counts large folios)")


def main() -> None:
    """Fold the newest rows of a copy of the ledger and print what it wrote."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ledger", type=Path)
    ap.add_argument("--rows", type=int, default=FOLD_ROWS)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fold-writes-", dir=args.ledger.parent))
    try:
        path = work / "ledger.sqlite3"
        shutil.copy(args.ledger, path)
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-65536")  # the ledger's own (exporter.ledger.opening)
        rows = db.execute("SELECT count(*) FROM requests").fetchone()[0]
        top = db.execute("SELECT max(id) FROM requests").fetchone()[0]
        db.execute(f"UPDATE requests SET indexed = 0 WHERE id > {top - args.rows}")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        _drop_caches()
        before = _written()
        db.execute("BEGIN")
        folded = fold(db, at=1)
        db.execute("COMMIT")
        frames = committed_frames(path)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        written = _written() - before
        page = db.execute("PRAGMA page_size").fetchone()[0]
        db.close()
        print(json.dumps({"ledger_rows": rows, "folded": folded, "page_size": page,
                          "wal_frames": frames,
                          "write_kib_per_row": round(written / folded / 1024, 1)}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
