"""Ingestion: discover → tail → parse → ledger, for one pass over the transcripts.

A pass stats every transcript, reads only files that changed since their
checkpoint, parses the new complete lines and commits them to the ledger in
batches of about ``BATCH_BYTES``. Big cold scans fan out over processes
(parsing is CPU-bound and the merge is order-free, so workers need no
coordination); the parent alone writes the ledger.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import structlog

from exporter.ingest.discover import find_transcripts, is_compaction_file, projects_dirs
from exporter.ingest.parse import parse_lines
from exporter.ingest.tail import read_new, unchanged
from exporter.ledger import Applied, Ledger
from exporter.records import Appearance, Checkpoint, Parsed

BATCH_BYTES: Final = 128 * 1024 * 1024  # per ledger transaction
GROUP_BYTES: Final = 16 * 1024 * 1024  # per work unit handed to a parser process
PARALLEL_MIN_BYTES: Final = 24 * 1024 * 1024  # below this, a process pool costs more than it saves
BYTES_PER_REQUEST: Final = 5_000  # transcript bytes per new request, roughly (a month's mean)

Progress = Callable[[int, int], None]
"""Called as ``progress(bytes_done, bytes_total)`` while a pass runs."""


@dataclass(slots=True)
class ScanResult:
    """What one pass did."""

    files: int = 0
    files_read: int = 0
    bytes_read: int = 0
    new_requests: int = 0
    upgraded_requests: int = 0
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(slots=True)
class _Batch:
    """One worker's output for a group of files."""

    parsed: Parsed
    checkpoints: list[Checkpoint]
    bytes_read: int
    errors: list[tuple[str, str]]
    # (path, session, keys) of each file that carried requests: the provenance
    seen: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def absorb(self, other: _Batch) -> _Batch:
        """Fold another group's output into this one (merging is order-free)."""
        self.parsed.update(other.parsed)
        self.checkpoints.extend(other.checkpoints)
        self.bytes_read += other.bytes_read
        self.errors.extend(other.errors)
        self.seen.extend(other.seen)
        return self


# Top-level (not a method) so that a process pool can pickle it.
def read_files(work: Sequence[tuple[str, Checkpoint | None]]) -> _Batch:
    """Read and parse the new lines of some files (runs in a worker or inline)."""
    batch = _Batch(Parsed(), [], 0, [])
    for path, start_cp in work:
        cp = start_cp
        # Each file parsed on its own, then folded in: its keys are its provenance.
        local = Parsed()
        try:
            while (chunk := read_new(path, cp)) is not None:
                parse_lines(chunk.data, compaction_file=is_compaction_file(path), into=local)
                batch.bytes_read += len(chunk.data)
                cp = chunk.checkpoint
                if not chunk.data:
                    break  # only an incomplete line, or a restart with nothing complete yet
        except OSError as exc:
            batch.errors.append((path, exc.strerror or str(exc)))
        if local.requests:
            session = min(r.session for r in local.requests.values())
            batch.seen.append((path, session, tuple(local.requests)))
        batch.parsed.update(local)
        if cp is not None:
            batch.checkpoints.append(cp)
    return batch


class Scanner:
    """Runs ingestion passes over some transcript directories into a ledger."""

    def __init__(
        self,
        ledger: Ledger,
        dirs: Sequence[Path],
        *,
        workers: int | None = None,
        on_applied: Callable[[Applied], None] | None = None,
        log: Any = None,
        parallel_min_bytes: int = PARALLEL_MIN_BYTES,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        """Set up passes; ``workers`` defaults to the CPU count, at most 8 (1: no pool)."""
        self.parallel_min_bytes = parallel_min_bytes
        self.batch_bytes = batch_bytes
        self.ledger = ledger
        self.dirs = list(dirs)
        # Each worker holds a batch in memory (~40 MB): past 8 the disk is the limit anyway.
        self.workers = workers if workers is not None else min(8, os.cpu_count() or 1)
        self.on_applied = on_applied
        self.log = log if log is not None else structlog.get_logger()
        self._absent: set[str] = set()  # absent roots already logged

    def root_of(self, path: str) -> str:
        """The transcript directory ``path`` was found under (the deepest that holds it)."""
        best = ""
        for top in self.dirs:
            root = os.path.abspath(top)
            if (path.startswith(root.rstrip("/") + "/") or path == root) and len(root) > len(best):
                best = root
        return best

    def files(self) -> list[str]:
        """The transcript files present now."""
        # Resolved on every pass: a config root's projects/ may appear after start, and
        # then only it is read (not the root's other *.jsonl, such as history.jsonl).
        return find_transcripts(projects_dirs(self.dirs), self._problem)

    def scan(self, progress: Progress | None = None) -> ScanResult:
        """One pass: read everything new, commit it, return what happened."""
        started = time.perf_counter()
        result = ScanResult()
        paths = self.files()
        result.files = len(paths)
        work, total = self._plan(paths, result)
        done = 0
        pending: _Batch | None = None
        with self.ledger.bulk(total // BYTES_PER_REQUEST):
            for batch in self._run(work, total):
                # Workers hand in small groups (load balance); the ledger takes them in
                # larger transactions: each commit has a fixed cost, and all are atomic.
                pending = batch if pending is None else pending.absorb(batch)
                if pending.bytes_read >= self.batch_bytes:
                    self._commit(pending, result)
                    pending = None
                done += batch.bytes_read
                if progress:
                    progress(min(done, total), total)
            if pending is not None:
                self._commit(pending, result)
        result.seconds = time.perf_counter() - started
        return result

    def _plan(
        self, paths: list[str], result: ScanResult
    ) -> tuple[list[list[tuple[str, Checkpoint | None]]], int]:
        """Group the files that changed into work units of about GROUP_BYTES."""
        cps = self.ledger.checkpoints()
        present = set(paths)
        gone = [p for p in cps if p not in present and not os.path.exists(p)]
        if gone:
            self.ledger.forget_files(gone)
        groups: list[list[tuple[str, Checkpoint | None]]] = [[]]
        size = total = 0
        for path in paths:
            try:
                st = os.stat(path)
            except OSError as exc:
                why = exc.strerror or str(exc)
                self._problem("transcript_unreadable", path, why)
                result.unreadable.append((path, why))
                continue
            cp = cps.get(path)
            if unchanged(st, cp):
                continue
            pending = st.st_size - (cp.offset if cp and cp.ino == st.st_ino else 0)
            if size and size + pending > min(self.batch_bytes, GROUP_BYTES):
                groups.append([])
                size = 0
            groups[-1].append((path, cp))
            size += max(pending, 0)
            total += max(pending, 0)
        return [g for g in groups if g], total

    def _run(self, work: list[list[tuple[str, Checkpoint | None]]], total: int) -> Any:
        """Yield each group's batch, from a process pool when it pays off."""
        if self.workers < 2 or total < self.parallel_min_bytes or len(work) < 2:
            yield from (read_files(g) for g in work)
            return
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(self.workers, len(work)), mp_context=ctx) as pool:
            futures = [pool.submit(read_files, g) for g in work]
            for fut in as_completed(futures):
                yield fut.result()

    def _commit(self, batch: _Batch, result: ScanResult) -> None:
        """Write one batch to the ledger and account for it."""
        for path, why in batch.errors:
            self._problem("transcript_unreadable", path, why)
        result.unreadable.extend(batch.errors)
        seen = [Appearance(path, self.root_of(path), session, keys)
                for path, session, keys in batch.seen]
        applied = self.ledger.apply(batch.parsed, batch.checkpoints, batch.bytes_read, seen)
        result.files_read += len(batch.checkpoints)
        result.bytes_read += batch.bytes_read
        result.new_requests += len(applied.new)
        result.upgraded_requests += len(applied.upgraded)
        if self.on_applied:
            self.on_applied(applied)

    def _problem(self, event: str, path: str, detail: str) -> None:
        """Log a file-system problem once per pass; it never stops ingestion.

        An absent root is normal (a default root the user never made, a tree
        not created yet): said once per path, at DEBUG.
        """
        if event == "transcript_root_missing":
            if path not in self._absent:
                self._absent.add(path)
                self.log.debug(event, path=path, detail=detail)
            return
        self.log.warning(event, path=path, detail=detail)
