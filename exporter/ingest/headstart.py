"""A head start: a cold pass's parser processes begin before the command has loaded.

A cold ``report`` spends its first ~0.2 s on one core: the interpreter, then
the command's imports (pydantic's settings model, the report's tables),
while the other core idles and the parsing, the bulk of the work, waits.
:func:`begin` starts that parsing first, from a guess of what the command
will read: the directories walked, every file read from its start, the
default scan options. The parser processes are forked from a small process
(the CLI not yet imported); one unit at a time is parsed until the pass
takes the work over (the start-up has the other core), and the batches wait
in the pool.

The guess is checked, never trusted: the command's :class:`Scanner` takes
the work over only if the same directories were walked with the same
options and its ledger remembers no file, which is exactly the pass it
would have run (exporter.ingest.scan). Otherwise the head start is stopped
(the units not begun are dropped) and the pass runs as always. The walk's
time stands for the pass's: a file written after it is read by the next pass.

``exporter.cli.early`` makes the guess from the command line; this module only
walks, plans and forks.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import BrokenExecutor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from exporter.ingest.discover import find_transcripts, projects_dirs
from exporter.ingest.parse import MAX_LINE_BYTES
from exporter.ingest.scan import (
    BATCH_BYTES,
    PARALLEL_MIN_BYTES,
    PARSER_NICE,
    Pooled,
    Work,
    default_workers,
    plan_units,
    pool_for,
)

if TYPE_CHECKING:
    from exporter.ingest.scan import _Batch


@dataclass(frozen=True)
class Walk:
    """What a head start walked and planned: the pass's files, as of its start."""

    tops: list[str]  # the projects directories walked (absolute)
    files: list[str]
    problems: list[tuple[str, str, str]]  # (event, path, detail) met by the walk
    unreadable: list[tuple[str, str]]  # (path, why): files the plan could not stat
    work: Work
    total: int


class _Options(NamedTuple):
    """The scan options a head start ran with (a :class:`Scanner`'s of the same names)."""

    workers: int
    batch_bytes: int
    max_line_bytes: int
    parser_nice: int


class HeadStart:
    """Parsing under way for a first pass: what was walked and planned, and its parsers.

    Until a pass takes the work over, one unit is parsed at a time: the
    command's own start-up runs on one core, and a second parser beside it
    would slow it as much as it gains. A thread of this object hands the
    units over one by one; a pass that takes the work hands over all the rest.
    """

    def __init__(self, walk: Walk, options: _Options, pooled: Pooled) -> None:
        """Hand the first unit over (forking the parsers here, before any thread), then feed."""
        self.walk = walk
        self._options = options
        self.taken = False  # a pass took the work over (else it was stopped, or still waits)
        self._pooled: Pooled | None = pooled
        self._halt = False  # the thread hands nothing more over
        self._wake = threading.Event()  # a unit is done, or _halt was set
        first = pooled.submit(walk.work[:1])[0]
        self._given = 1  # units handed over (the thread's count, read once it has ended)
        self._feeder = threading.Thread(target=self._feed, args=(pooled, first),
                                        name="head-start", daemon=True)
        self._feeder.start()

    def fits(self, tops: Sequence[Path], *, workers: int, batch_bytes: int, max_line_bytes: int,
             parser_nice: int) -> bool:
        """Whether a pass over ``tops`` with these options is the one this walked and started."""
        return (self.walk.tops == [os.path.abspath(d) for d in tops]
                and self._options == _Options(workers, batch_bytes, max_line_bytes, parser_nice))

    def _feed(self, pooled: Pooled, first: Future[Any]) -> None:
        """In the thread: the next unit once the last is done, until told to stop feeding.

        The units it has handed over are counted in ``_given``; whoever stops
        it hands over the rest (or drops them) itself, so a thread that ended
        early (a broken pool) loses no unit.
        """
        work = self.walk.work
        current = first
        while self._given < len(work):
            current.add_done_callback(lambda _done: self._wake.set())
            self._wake.wait()
            self._wake.clear()
            if self._halt:
                return
            try:
                current = pooled.submit(work[self._given:self._given + 1])[0]
            except (BrokenExecutor, RuntimeError):  # the pool broke: the pass meets it
                return
            self._given += 1

    def _release(self) -> Pooled | None:
        """Stop the thread (it hands nothing more over) and wait for it; the pool, once."""
        pooled, self._pooled = self._pooled, None
        if pooled is not None:
            self._halt = True
            self._wake.set()
            self._feeder.join()
        return pooled

    def batches(self) -> Iterator[_Batch]:
        """Each unit's batch as it is done (taken once); the processes end with the last."""
        pooled = self._release()
        if pooled is not None:
            self.taken = True
            try:
                pooled.submit(self.walk.work[self._given:])  # every unit the thread did not
            except BaseException:
                pooled.stop()
                raise
            yield from pooled.batches()

    def stop(self) -> None:
        """End the parser processes if nobody took the work: units not begun are dropped."""
        pooled = self._release()
        if pooled is not None:
            pooled.stop()


def begin(
    dirs: Sequence[Path], *, workers: int | None = None, batch_bytes: int = BATCH_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES, parser_nice: int = PARSER_NICE,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES, clock: Callable[[], float] = time.time,
) -> HeadStart | None:
    """Walk ``dirs`` and start parsing their files, as a first pass over them would.

    None when that pass would not use parser processes (a small tree, one
    worker): then there is nothing to start early. The options are a
    :class:`Scanner`'s, with the same defaults. Call it before any other
    thread exists: the parser processes are forked here.
    """
    workers = default_workers() if workers is None else workers
    tops = projects_dirs(dirs)
    problems: list[tuple[str, str, str]] = []
    files = find_transcripts(tops, lambda *problem: problems.append(problem))
    unreadable: list[tuple[str, str]] = []
    work, total = plan_units(files, {}, batch_bytes, unreadable)
    pooled = pool_for(work, total, now=clock(), max_line_bytes=max_line_bytes, workers=workers,
                      parser_nice=parser_nice, parallel_min_bytes=parallel_min_bytes)
    if pooled is None:
        return None
    walk = Walk([os.path.abspath(d) for d in tops], files, problems, unreadable, work, total)
    return HeadStart(walk, _Options(workers, batch_bytes, max_line_bytes, parser_nice), pooled)
