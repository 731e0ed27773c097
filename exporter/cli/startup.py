"""The one piece of start-up machinery: a command's imported heap frozen for the collector.

Every object that exists once the command line is imported (pydantic's
settings model, the tables' code) lives as long as the process. Moved to the
collector's permanent generation (``gc.freeze``), no collection walks them
again, and the interpreter's teardown at exit does not either: that is what
it buys, most of all for a warm ``report``, whose run is short enough for
the exit to weigh (docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import NoReturn


def run(command: Callable[[], int]) -> NoReturn:
    """Freeze what is imported by now, run ``command`` as the process's job, exit with its code."""
    gc.freeze()
    raise SystemExit(command())
