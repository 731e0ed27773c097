"""The SQLite driver every part of the program uses: a current SQLite where one is installed.

Python's ``sqlite3`` drives the system's SQLite library, which can be years
old (Debian 12's is 3.40.1, from 2022). On Linux x86_64 the package also
installs pysqlite3-binary: the same driver (a fork of Python's module, the
same API) built with a current SQLite. Its sorter and bytecode engine take
about a quarter less time over the GROUP BYs that end a cold pass, the
serial part of a cold ``report`` (docs/benchmarks-history.md). Elsewhere, or without
that wheel, Python's own module is used: the file format is the same, and so
is every figure (tests/test_sqlite_engine.py).

Every module opens connections and catches SQLite's errors through this one
(``from exporter.sqlite import sqlite3``): the two drivers' exception classes
are not the same classes, and two SQLite libraries in one process must never
open the same file (each keeps its own POSIX locks, so a close in one drops
the locks the other holds). :data:`LIBRARY` is the file of the driver's
extension module, whose SQLite exporter.cli.startup tunes ("" if it has none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

    LIBRARY: str
else:
    try:
        from pysqlite3 import _sqlite3 as _native
        from pysqlite3 import dbapi2 as sqlite3
    except ImportError:  # not Linux x86_64, or the wheel is missing: Python's own
        import _sqlite3 as _native
        import sqlite3

    # ("": a driver built into the interpreter, whose library tune_sqlite leaves alone.)
    LIBRARY = getattr(_native, "__file__", None) or ""

__all__ = ["LIBRARY", "sqlite3"]
