"""A progress bar for long scans, shown on a terminal only (rich)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def progress_bar(enabled: bool, label: str = "reading transcripts",
                 unit: str = "bytes") -> Iterator[Callable[[int, int], None] | None]:
    """Yield a ``progress(done, total)`` callback drawing a bar, or None when disabled.

    ``unit``: "bytes" (sizes and speed) or "steps" (done/total counts, e.g. blocks).
    """
    if not enabled:
        yield None
        return
    # Imported here: `report --json` and pipes never draw a bar and skip rich's import.
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns: tuple[Any, ...] = (
        (BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
        if unit == "bytes" else (BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()))
    # On stderr, like the logs: stdout carries the report (and may be a pipe).
    with Progress(label, *columns, transient=True,
                  console=Console(stderr=True)) as bar:
        task = bar.add_task("scan", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
