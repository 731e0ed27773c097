"""A pass's processes and memory: parsers that die with their parent, a pass without gc.

A pool's initializer (``die_with_parent``) arms the kernel's parent-death
signal, lowers the parser's priority, and makes it keep the memory it frees:
a ``kill -9`` of the daemon must not leave parsers behind. ``gc_paused``
keeps the cyclic collector out of a pass in the process that writes.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Final


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (reference counting frees as always).

    A pass allocates a tuple per request, appearance and statement parameter
    (a month: ~10^6): each 700 of them set off a collection, and the older ones
    walk every surviving request of the batch, in the thread the ledger's
    commits wait on. Nothing a pass makes is a cycle; what other threads make
    meanwhile waits for the next collection after it.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def die_with_parent(parent: int, nice: int = 0) -> None:
    """Pool initializer: a parser process ends when the process that started it does.

    ``nice`` lowers its scheduling priority by that much (see ``scan.PARSER_NICE``).

    Otherwise a ``kill -9`` of the daemon leaves its workers blocked for good on
    the pool's queue (each worker holds the queue's write end, so no EOF comes),
    and they ignore SIGTERM through the daemon's handler, inherited by fork.

    A parser process lives for one pass and makes no cycles: it runs without
    the cyclic collector (which would walk every object it inherited, too, and
    copy their pages).
    """
    gc.disable()
    if nice > 0:
        with contextlib.suppress(OSError):  # a sandbox that forbids it: run at the same priority
            os.nice(nice)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the parent; then this dies
    if sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415 - only workers need it

        pr_set_pdeathsig = 1  # <linux/prctl.h>
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        _keep_freed_memory(libc)
    else:  # no death signal: watch the parent instead
        threading.Thread(target=_orphan_watch, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)


# glibc's mallopt parameters (<malloc.h>), and how much freed memory a parser keeps.
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_MMAP_THRESHOLD: Final = 32 * 1024 * 1024  # glibc's largest on 64-bit systems
_TRIM_THRESHOLD: Final = 128 * 1024 * 1024


def _keep_freed_memory(libc: Any) -> None:
    """Let this parser reuse the memory it frees instead of handing it back to the system.

    A parser allocates and frees large blocks (each file's buffer, its
    dictionaries' tables). By default glibc maps a large block freshly and
    unmaps it when freed, or trims the heap's top, so later blocks fault
    their pages in again and the kernel zeroes them first: on a month of
    transcripts half of a parser's page faults (docs/benchmarks-history.md).
    A parser lives for one pass, so the memory it keeps goes with it. A C
    library without ``mallopt`` (not glibc) is left as it is.
    """
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


def _orphan_watch(parent: int) -> None:
    """Exit this worker once its parent is gone (where no death signal exists)."""
    while os.getppid() == parent:
        time.sleep(1.0)  # a cheap poll; nothing waits on this thread
    os._exit(1)


