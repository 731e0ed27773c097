"""The line counters per transcript root, kept with the global ones, and read for a scope.

The ``counters`` table holds every line the ledger ever counted, for
``/metrics``; ``root_counters`` holds the same counts by the root whose file
held the line, so a report on some roots shows their lines and rejections only.
A line carrying a request is ``usage`` in the root of the first file (in the
batch's order) that carried its key while it was new, ``duplicate`` elsewhere:
the roots' counts add up to the global ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from exporter.ledger.schema import UNATTRIBUTED_ROOT
from exporter.records import Appearance, LineCounts, LineResult, RootLines
from exporter.sqlite import sqlite3

Reader = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one read-only query with its parameters (``Ledger.read``)."""
_ADD = ("INSERT INTO root_counters VALUES (?,?,?,?) ON CONFLICT (root, name, label) "
        "DO UPDATE SET value = value + excluded.value")


def add(db: sqlite3.Connection, by_root: RootLines | None, new_keys: Iterable[str],
        appearances: Sequence[Appearance], *, whole: LineCounts, bytes_read: int) -> None:
    """Add one batch's line counts to its roots (caller's transaction).

    ``new_keys``: the batch's new requests that a line carried (not parts
    billed on top). Without ``by_root`` (a caller that did not split its
    counts) the batch's counts, ``whole`` and ``bytes_read``, are unattributed.
    """
    fresh = set(new_keys)
    owner: dict[str, str] = {}
    for app in appearances:
        for key in app.keys:
            if key in fresh and key not in owner:
                owner[key] = app.root
    added = Counter(owner.values())
    ids: dict[str | None, int] = {None: UNATTRIBUTED_ROOT}
    parts: list[tuple[str | None, LineCounts, int, int]] = (
        [(None, whole, bytes_read, len(fresh))] if by_root is None else
        [(root, counts, nbytes, added[root]) for root, (counts, nbytes) in by_root.items()])
    rows: list[tuple[int, str, str, int]] = []
    for root, counts, nbytes, new in parts:
        if root not in ids and root is not None:
            ids[root] = _root_id(db, root)
        rows.extend((ids[root], name, label, n) for name, label, n in _rows(counts, nbytes, new)
                    if n)
    db.executemany(_ADD, rows)


def _rows(counts: LineCounts, nbytes: int, new: int) -> list[tuple[str, str, int]]:
    """One root's counter increments (as the global counters take them)."""
    return [
        ("lines", LineResult.USAGE, new),
        ("lines", LineResult.DUPLICATE, counts.usage_lines - new),
        ("lines", LineResult.OTHER, counts.other),
        ("lines", LineResult.REJECTED, sum(counts.rejected.values())),
        ("bytes_read", "", nbytes),
        *(("mended", kind, n) for kind, n in counts.mended.items()),
        *(("rejected", reason, n) for reason, n in counts.rejected.items()),
        *(("iterations", kind, n) for kind, n in counts.iterations.items()),
    ]


def _root_id(db: sqlite3.Connection, root: str) -> int:
    """The id of a transcript root in ``roots`` (added on first use)."""
    db.execute("INSERT OR IGNORE INTO roots (path) VALUES (?)", (root,))
    return int(db.execute("SELECT id FROM roots WHERE path = ?", (root,)).fetchone()[0])


def read(db_read: Reader, name: str, root_ids: Sequence[int]) -> dict[str, int]:
    """One family of counters summed over the roots ``root_ids``."""
    if not root_ids:
        return {}
    marks = ",".join("?" * len(root_ids))
    return dict(db_read(f"SELECT label, sum(value) FROM root_counters WHERE name = ? AND root "
                        f"IN ({marks}) GROUP BY label", (name, *root_ids)))
