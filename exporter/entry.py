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


def main(argv: Sequence[str] | None = None) -> int:
    """``statusline`` → exporter.statusline; anything else → exporter.cli.

    Without ``argv`` this process is the command: it runs through :func:`run`.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:
        if args[:1] != ["statusline"]:
            # Imported before run() freezes the heap: the CLI's modules (pydantic's settings
            # model among them) are most of what the freeze is for.
            from exporter import cli  # noqa: F401, PLC0415
        run(lambda: _command(args))
    return _command(args)


def _command(args: list[str]) -> int:
    """Run one command line (without the program name); its exit code."""
    if args[:1] == ["statusline"]:
        from exporter import statusline  # noqa: PLC0415 -- the point of this module

        return statusline.main(args[1:], sys.stdin.buffer, sys.stdout.buffer, os.environ)
    from exporter import cli  # noqa: PLC0415

    code: int = cli.main(args)
    return code


def run(command: Callable[[], int]) -> NoReturn:
    """Run ``command`` as this process's whole job, then :func:`finish` with its exit code.

    First, every object that exists by now (the imported modules': pydantic's
    settings model, our tables' code) moves to the collector's permanent
    generation (``gc.freeze``). They live as long as the process anyway; frozen,
    no full collection walks them again: 0.2-0.4 s less of a cold ``report``'s
    parent CPU on a 300 MB month (docs/benchmarks.md), and the forked parser
    processes neither walk them nor copy the pages their collections would
    touch. The few cycles imports leave as garbage (tens of objects) stay.
    """
    import gc  # noqa: PLC0415 -- built in; not for statusline's import list

    gc.freeze()
    finish(command())


def finish(code: int) -> NoReturn:
    """End the process with ``code`` once the command has returned, skipping the teardown.

    The interpreter's own exit frees every object of every imported module
    (pydantic's, the ledger's caches): ~60 ms of a warm ``report``'s ~0.4 s
    (docs/benchmarks.md). Here the atexit handlers still run and stdout and
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
