"""The console script's first stop: ``statusline`` runs without importing the full CLI.

Claude Code starts the status-line command on every refresh; the full command
line imports pydantic, OpenTelemetry and rich (hundreds of milliseconds), so
``claude-code-exporter statusline`` is dispatched here before any of that.
Point ``[project.scripts]`` at :func:`main` to use it.

:func:`run` runs a command as the process's whole job: the import-time heap
frozen for the collector first, and :func:`finish` at the end, which ends the
process without the interpreter's teardown.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # collections.abc costs milliseconds at run time; annotations only
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import NoReturn

    from exporter.ingest.headstart import HeadStart


def main(argv: Sequence[str] | None = None) -> int:
    """``statusline`` → exporter.cli.statusline; anything else → exporter.cli.commands.

    Without ``argv`` this process is the command: it runs through :func:`run`,
    and a cold ``report`` gets its parsing started before the CLI is imported
    (exporter.cli.early).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:
        head = None
        if args[:1] != ["statusline"]:
            # A cold report's parsing begins now, on the core the imports leave idle.
            from pathlib import Path  # noqa: PLC0415 -- not for the status line

            from exporter.cli.early import head_start  # noqa: PLC0415

            head = head_start(args, os.environ, Path.home())
            # Imported before run() freezes the heap: the CLI's modules (pydantic's settings
            # model among them) are most of what the freeze is for.
            from exporter.cli import commands as cli  # noqa: F401, PLC0415
        run(lambda: _command(args, head))
    return _command(args)


def _command(args: list[str], head: HeadStart | None = None) -> int:
    """Run one command line (without the program name); its exit code.

    ``head``: a report's parsing begun already (exporter.cli.early), which the
    command takes over or stops.
    """
    if args[:1] == ["statusline"]:
        from exporter.cli import statusline  # noqa: PLC0415 -- the point of this module

        return statusline.main(args[1:], sys.stdin.buffer, sys.stdout.buffer, os.environ)
    from exporter.cli import commands as cli  # noqa: PLC0415

    code: int = cli.main(args, head_start=head)
    return code


def run(command: Callable[[], int]) -> NoReturn:
    """Run ``command`` as this process's whole job, then :func:`finish` with its exit code.

    First, SQLite is set up for the command (:func:`tune_sqlite`). Then every
    object that exists by now (the imported modules': pydantic's settings
    model, our tables' code) moves to the collector's permanent generation
    (``gc.freeze``). They live as long as the process anyway; frozen,
    no full collection walks them again: 0.2-0.4 s less of a cold ``report``'s
    parent CPU on a 300 MB month (docs/benchmarks-history.md), and the forked parser
    processes neither walk them nor copy the pages their collections would
    touch. The few cycles imports leave as garbage (tens of objects) stay.
    """
    import gc  # noqa: PLC0415 -- built in; not for statusline's import list

    # This process is the command, named by its first word (main's and __main__'s sys.argv).
    # The status line uses no SQLite: it is spared the imports.
    name = sys.argv[1:2]
    if name != ["statusline"]:
        tune_sqlite(one_thread_each=name == ["report"])
    gc.freeze()
    finish(command())


_SQLITE_CONFIG_MULTITHREAD = 2  # <sqlite3.h>
_SQLITE_CONFIG_MEMSTATUS = 9


def tune_sqlite(*, one_thread_each: bool = False, library: str | None = None) -> bool:
    """Take two global locks out of SQLite's work for this process; whether that was done.

    SQLite counts every allocation in global statistics under a global
    mutex, and by default also locks a connection's mutex around each call
    on it (each bind, step and reset): several mutex operations a row, and a
    ledger writes several rows a request. Nothing of ours reads the
    statistics (``sqlite3_memory_used``), so they are off. The connections'
    mutexes go only with ``one_thread_each``, for a command whose every
    connection is used by one thread alone (a ``report``: the ledger's on
    the main thread, the reader beside it on its own); ``serve`` shares its
    ledger between threads under the ledger's lock and keeps them. A cold
    ``report`` spends the less of the thread that writes the ledger, the one
    every batch waits on (docs/benchmarks-history.md).

    The settings can only change while SQLite is not initialized, which
    importing :mod:`sqlite3` did: so SQLite is shut down first, which its
    documentation allows while no connection is open (none is, before a
    command runs; SQLite holding any memory says one is, and then nothing
    is changed), and the next connection initializes it again. The
    functions are looked up through the driver's own extension module
    (``library``, by default :data:`exporter.sqlite.LIBRARY`), so they act on
    the SQLite it uses (a copy of its own, or the system's); a driver built
    into the interpreter has none, and is left as it is.
    Linux only: the calls pass a variadic argument, which ctypes passes as
    the C calling convention expects only there. Any failure leaves SQLite
    as it was.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes  # noqa: PLC0415 -- a command's, not statusline's

        from exporter.sqlite import LIBRARY  # noqa: PLC0415

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


def finish(code: int) -> NoReturn:
    """End the process with ``code`` once the command has returned, skipping the teardown.

    The interpreter's own exit frees every object of every imported module
    (pydantic's, the ledger's caches): ~60 ms of a warm ``report``'s ~0.4 s
    (docs/benchmarks-history.md). Here the atexit handlers still run and stdout and
    stderr are flushed; then the process ends at once. With a non-zero code,
    another thread still running, or output that cannot be flushed (a closed
    pipe), the exit is the ordinary one, with Python's own handling.
    """
    threading = sys.modules.get("threading")  # never imported: no other thread was started
    # A failure takes the ordinary exit: it is rare, and whatever it left open (a file,
    # a connection) is then closed by the interpreter, as before.
    if code == 0 and (threading is None or threading.active_count() == 1):
        import atexit  # noqa: PLC0415

        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # the ordinary exit reports it as Python does
        else:
            os._exit(code)
    raise SystemExit(code)
