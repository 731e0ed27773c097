"""Ledgers built from requests, for projection tests: rollups made by the real ledger code."""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from exporter.ledger.store import Ledger
from exporter.ledger.wal import committed_frames
from exporter.projections.metrics import MetricsOptions
from exporter.projections.pricing import RateTable
from exporter.records import Appearance, Parsed, Request
from exporter.sqlite import sqlite3

ROOT = "/transcripts/projects"
Files = Mapping[str, tuple[str, str, list[str]]]  # path -> (root, session, keys)


def ledger_of(
    path: Path, requests: Iterable[Request], *, files: Files | None = None,
    options: MetricsOptions | None = None, lines: Mapping[str, int] | None = None,
    rejected: Mapping[str, int] | None = None, bytes_read: int = 0,
    clock: Callable[[], float] | None = None, settle: bool = True,
) -> Ledger:
    """A ledger holding ``requests``, each in one file per session unless ``files`` says.

    ``lines`` gives the usage, duplicate and other line counts; everything is
    settled at once unless ``settle`` is off.
    """
    opts = options or MetricsOptions()
    ledger = Ledger(path, rules=opts.counting(RateTable.load()), settle_seconds=opts.settle_seconds,
                    clock=clock or time.time)
    batch = list(requests)
    parsed = Parsed()
    for req in batch:
        parsed.add(req)
    counts = dict(lines or {})
    parsed.counts.usage_lines = counts.get("usage", len(batch)) + counts.get("duplicate", 0)
    parsed.counts.other = counts.get("other", 0)
    parsed.counts.rejected = Counter(rejected or {})
    ledger.apply(parsed, [], bytes_read, appearances(batch, files))
    if settle:
        ledger.settle(force=True)
    return ledger


def appearances(requests: Iterable[Request], files: Files | None = None) -> list[Appearance]:
    """The provenance of ``requests``: ``files``, or one file per session under ROOT."""
    if files is None:
        by_session: dict[str, list[str]] = defaultdict(list)
        for req in requests:
            by_session[req.session].append(req.key)
        files = {f"{ROOT}/p/{s}.jsonl": (ROOT, s, keys) for s, keys in by_session.items()}
    return [Appearance(p, root, session, tuple(keys))
            for p, (root, session, keys) in sorted(files.items())]


def provenance(ledger: Ledger) -> dict[str, tuple[str, str, list[str]]]:
    """Every file of a ledger: path -> (root, session, keys)."""
    out: dict[str, tuple[str, str, list[str]]] = {}
    rows = ledger.read(
        "SELECT f.path, coalesce(ro.path, ''), f.session, r.key FROM appearances a "
        "JOIN files f ON f.id = a.file JOIN requests r ON r.id = a.request "
        "LEFT JOIN roots ro ON ro.id = f.root ORDER BY f.path, r.ts, r.key"
    )
    for path, root, session, key in rows:
        out.setdefault(path, (root, session, []))[2].append(key)
    return out


def replica(source: Ledger, path: Path, keep: Callable[[Request], bool] = lambda r: True,
            options: MetricsOptions | None = None) -> Ledger:
    """A new ledger with the kept requests of ``source``, in the same files (same gaps)."""
    kept = [r for r in source.requests() if keep(r)]
    names = {r.key for r in kept}
    files = {p: (root, s, [k for k in keys if k in names])
             for p, (root, s, keys) in provenance(source).items()}
    return ledger_of(path, kept, files={p: f for p, f in files.items() if f[2]}, options=options)


def ledger_value(path: Path, sql: str, params: Sequence[object] = ()) -> Any:
    """The first column of the first row of one query on a ledger file, read-only (None: no row)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = con.execute(sql, params).fetchone()
        return None if row is None else row[0]
    finally:
        con.close()


def page_size(path: Path) -> int:
    """The page size in an SQLite file's header (bytes 16-17; 1 stands for 65536)."""
    with path.open("rb") as fh:
        size = int.from_bytes(fh.read(18)[16:18], "big")
    return 65536 if size == 1 else size


def next_kill_target(rng: random.Random, state: Path, total: int) -> int:
    """A random count of committed rows ahead of what the state dir's ledger holds.

    A kill aimed at a row count, not a moment: a wall-clock aim missed on a
    loaded machine, where a run faster than the timing run completed the
    ledger and left every later kill nothing to interrupt. All of them once
    the ledger holds every row (a first pass's deriving).
    """
    have = ledger_rows(state)
    return rng.randint(have + 1, total) if have < total else total


def raw_pending(state: Path) -> bool:
    """Whether the ledger holds a first pass whose derived state is not computed yet."""
    from exporter.ledger.staging import RAW_PASS

    path = state / "ledger.sqlite3"
    if not path.exists():
        return False
    try:
        return ledger_value(path, "SELECT 1 FROM meta WHERE name = ?", (RAW_PASS,)) is not None
    except sqlite3.OperationalError:  # killed before the schema was committed
        return False


def killed_mid_ingest(state: Path, total: int) -> bool:
    """Whether a kill left the ledger mid-ingest.

    Some of ``total`` rows committed, or all of a first pass's rows with their
    gaps, owners and rollups not yet derived (a raw pass, see Ledger.bulk).
    """
    rows = ledger_rows(state)
    return 0 < rows < total or (rows > 0 and raw_pending(state))


def ledger_rows(state: Path) -> int:
    """Rows committed to a state dir's ledger so far (0 before it has its schema)."""
    path = state / "ledger.sqlite3"
    if not path.exists():
        return 0
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT count(*) FROM requests").fetchone()[0])
    except sqlite3.OperationalError:  # killed before the schema was committed
        return 0
    finally:
        con.close()


class WalFrames:
    """WAL frames committed over a span, across the WAL's restarts (each fold-in's)."""

    def __init__(self, ledger: Path) -> None:
        self.ledger, self.total, self._last = ledger, 0, committed_frames(ledger)

    def look(self) -> None:
        """Count the frames committed since the last look."""
        now = committed_frames(self.ledger)
        self.total += now - self._last if now >= self._last else now
        self._last = now
