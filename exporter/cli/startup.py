"""The start-up machinery a command runs under, each piece kept for what it buys.

- :func:`tune_sqlite` takes two global locks out of SQLite's work for the
  process: a cold ``report`` spends the less on the thread that writes the
  ledger, the one every batch waits on.
- ``gc.freeze`` moves what the command line imported (pydantic's settings
  model, the tables' code) to the collector's permanent generation: no
  collection walks it again, and neither does the teardown at exit, which a
  warm ``report`` is short enough to feel.
- :func:`finish` ends a command that succeeded without the interpreter's
  teardown (freeing every object of every module imported), once the atexit
  handlers have run and the output is flushed.

Each earned its place by a measured share of a ``report``'s time
(docs/benchmarks.md, "Start-up"); the status line runs without them.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import NoReturn

_SQLITE_CONFIG_MULTITHREAD = 2  # <sqlite3.h>
_SQLITE_CONFIG_MEMSTATUS = 9


def run(command: Callable[[], int], name: str) -> NoReturn:
    """Run ``command`` (the command line's ``name``: report, serve…) as the process's job; exit."""
    tune_sqlite(one_thread_each=name == "report")
    gc.freeze()
    finish(command())


def finish(code: int) -> NoReturn:
    """End the process with ``code``, skipping the teardown when that is safe.

    Safe means: the command succeeded, no other thread runs, and the output
    flushes. The atexit handlers run first, as on any exit. Otherwise (a failure,
    a thread still running, a closed pipe) the exit is Python's ordinary one,
    which closes whatever was left open and reports what it must.
    """
    threading = sys.modules.get("threading")  # never imported: no other thread was started
    if code == 0 and (threading is None or threading.active_count() == 1):
        import atexit

        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # the ordinary exit reports it as Python does
        else:
            os._exit(code)
    raise SystemExit(code)


def tune_sqlite(*, one_thread_each: bool = False, library: str | None = None) -> bool:
    """Take two global locks out of SQLite's work for this process; whether that was done.

    SQLite counts every allocation in global statistics under a global
    mutex, and by default also locks a connection's mutex around each call
    on it (each bind, step and reset): several mutex operations a row.
    Nothing of ours reads the statistics, so they are off. The connections'
    mutexes go only with ``one_thread_each``, for a command whose every
    connection is used by one thread alone (a ``report``: the ledger's on
    the main thread, the reader beside it on its own); ``serve`` shares its
    ledger between threads under the ledger's lock and keeps them.

    The settings can only change while SQLite is not initialized, which
    importing the driver did: so SQLite is shut down first, which its
    documentation allows while no connection is open (SQLite holding any
    memory says one is, and then nothing is changed). The functions are
    looked up through the driver's own extension module (``library``, by
    default :data:`exporter.sqlite.LIBRARY`), so they act on the SQLite it
    uses; a driver built into the interpreter has none and is left alone.
    Linux only: the calls pass a variadic argument, which ctypes passes as
    the C calling convention expects only there. Any failure leaves SQLite
    as it was.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        from exporter.sqlite import LIBRARY

        library = LIBRARY if library is None else library
        if not library:
            return False
        lib = ctypes.CDLL(library)
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        # Memory in use means something is open: shutting down would pull it from under it.
        if lib.sqlite3_memory_used() != 0 or lib.sqlite3_shutdown() != 0:
            return False
        done = lib.sqlite3_config(_SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0)) == 0
        if one_thread_each:
            done = lib.sqlite3_config(_SQLITE_CONFIG_MULTITHREAD) == 0 and done
    except (ImportError, OSError, AttributeError):
        return False
    return bool(done)
