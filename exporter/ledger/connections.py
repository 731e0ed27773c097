"""Connections to the ledger file besides :class:`~exporter.ledger.store.Ledger`'s own.

The plan tables (status-line samples, :mod:`exporter.ledger.plan_store`) are
written on a connection of their own, and the plan figures read beside the
writer on a read-only one. Other modules reach the ledger file only through
the ledger package: these, or a :class:`~exporter.ledger.store.Ledger`.
"""

from __future__ import annotations

import os

from exporter.sqlite import sqlite3


def plan_writer(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A second write connection to the ledger file, for the plan tables (autocommit)."""
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)


def reader(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-only connection to the ledger file (the plan figures read it beside the writer)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=10)
