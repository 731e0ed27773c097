"""Ingestion: discover → tail → parse → ledger, for one pass over the transcripts.

A pass stats every transcript, reads only files that changed since their
checkpoint, parses the new complete lines and commits them to the ledger in
batches of about ``BATCH_BYTES``. Big cold scans fan out over processes
(parsing is CPU-bound and the merge is order-free, so workers need no
coordination); the parent alone writes the ledger, and the workers die
with it (``die_with_parent``). A pass may be limited to the paths that file
events named; the full walk belongs to the periodic rescan.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic

import msgspec

from exporter.ingest.destination import DestinationT
from exporter.ingest.discover import canonical_key, find_transcripts, fs_path
from exporter.ingest.formats import CLAUDE, FORMATS, Root, agent_of
from exporter.ingest.parse import MAX_LINE_BYTES
from exporter.ingest.tail import read_new, unchanged
from exporter.ingest.workers import die_with_parent, gc_paused
from exporter.records import (
    Appearance,
    Applied,
    Checkpoint,
    LineCounts,
    MendKind,
    Parsed,
    RejectReason,
    Request,
    RootLines,
)

BATCH_BYTES: Final = 128 * 1024 * 1024  # per ledger transaction
GROUP_BYTES: Final = 16 * 1024 * 1024  # per work unit handed to a parser process
# The first work units are smaller, doubling up to GROUP_BYTES (a raw pass's commits too):
# the ledger, which a cold pass waits on, starts on the first megabyte instead of idling
# until two 16 MB units are parsed.
FIRST_GROUP_BYTES: Final = 1024 * 1024
PARALLEL_MIN_BYTES: Final = 24 * 1024 * 1024  # below this, a process pool costs more than it saves
BYTES_PER_REQUEST: Final = 5_000  # transcript bytes per new request, roughly (a month's mean)
# How much lower the parser processes run than the process that writes the ledger. A pass
# is a pipeline: the parsers' work can go anywhere on the cores, the writer's is one chain
# that every batch waits on. Three processes share two cores evenly without it, so the
# writer got about two thirds of one and finished its last batches alone after the parsers
# were done (docs/benchmarks-history.md). 5 gives the writer about three times a parser's share;
# against other programs the parsers still get a third of a normal process's.
PARSER_NICE: Final = 5

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
    rereads: int = 0  # files read again from byte 0: truncated, replaced or rewritten
    checked: int = 0  # files stat'ed: all on a full pass, the named ones on an event pass
    ahead: int = 0  # request lines dated ahead of the clock, left to be read by a later pass


@dataclass(slots=True)
class _Batch:
    """One worker's output for a group of files."""

    parsed: Parsed
    checkpoints: list[Checkpoint]
    bytes_read: int
    errors: list[tuple[str, str]]
    # (path, session, keys) of each file that carried requests: the provenance
    seen: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    rereads: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    ahead: list[tuple[str, int]] = field(default_factory=list)  # (path, request lines left)
    # (path, its line counts, its bytes read) of each file read: the counts by root
    by_file: list[tuple[str, LineCounts, int]] = field(default_factory=list)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled (a worker's result to the parent) with its requests as one msgpack blob.

        Pickle stores a named tuple field by field and rebuilds it through a
        Python-level ``__new__``, which costs a worker's CPU and as much of the
        parent's, which the ledger's commits compete for. msgspec encodes the
        same list in C and decodes it straight into :class:`Request` values
        (floats and integers exactly). A value it cannot encode (none the parser
        makes) goes by pickle.
        """
        state = (self.parsed.counts, self.parsed.limits, self.parsed.limit_rejected,
                 self.checkpoints, self.bytes_read, self.errors,
                 self.seen, self.rereads, self.ahead, self.by_file)
        try:
            wire = _WIRE_ENCODE(list(self.parsed.requests.values()))
        except (TypeError, ValueError, OverflowError):  # UnicodeEncodeError is a ValueError
            return _from_pickle, (self.parsed.requests, *state)
        return _from_wire, (wire, *state)

    def absorb(self, other: _Batch) -> _Batch:
        """Fold another group's output into this one (merging is order-free)."""
        self.parsed.update(other.parsed)
        self.checkpoints.extend(other.checkpoints)
        self.bytes_read += other.bytes_read
        self.errors.extend(other.errors)
        self.seen.extend(other.seen)
        self.rereads.extend(other.rereads)
        self.ahead.extend(other.ahead)
        self.by_file.extend(other.by_file)
        return self


_WIRE_ENCODE: Final = msgspec.msgpack.Encoder().encode
_WIRE_DECODE: Final = msgspec.msgpack.Decoder(list[Request]).decode


def _from_wire(wire: bytes, counts: LineCounts, limits: Any, rejected: Any,
               *state: Any) -> _Batch:
    """A batch unpickled from :meth:`_Batch.__reduce__` (requests keyed as the parser kept them)."""
    requests = {req.key: req for req in _WIRE_DECODE(wire)}
    return _Batch(Parsed(requests, counts, limits, rejected), *state)


def _from_pickle(requests: dict[str, Request], counts: LineCounts, limits: Any, rejected: Any,
                 *state: Any) -> _Batch:
    """A batch unpickled from :meth:`_Batch.__reduce__`'s fallback (plain pickle)."""
    return _Batch(Parsed(requests, counts, limits, rejected), *state)


# Top-level (not a method) so that a process pool can pickle it.
def read_files(
    work: Sequence[tuple[str, Checkpoint | None]], now: float | None = None,
    max_line_bytes: int = MAX_LINE_BYTES, agents: Sequence[tuple[str, str]] = (),
) -> _Batch:
    """Read and parse the new lines of some files (runs in a worker or inline).

    ``now`` is the clock far-future timestamps are judged against; ``agents``
    ((directory, agent) of the roots not Claude Code's) chooses each file's parser.
    """
    batch = _Batch(Parsed(), [], 0, [])
    for path, start_cp in work:
        cp = start_cp
        # Each file parsed on its own, then folded in: its keys are its provenance.
        local = Parsed()
        before = batch.bytes_read
        fmt = FORMATS[agent_of(fs_path(path), agents)] if agents else FORMATS[CLAUDE]
        try:
            while (chunk := read_new(path, cp, max_line=max_line_bytes)) is not None:
                chunk, ahead = fmt.parse_chunk(chunk, cp, local, now=time.time() if now is None
                                               else now, max_line_bytes=max_line_bytes)
                if chunk.too_long:  # skipped unread by the tail stage, counted like parsed ones
                    local.counts.rejected[RejectReason.TOO_LONG] += chunk.too_long
                if chunk.restarted:
                    batch.rereads.append((path, chunk.reason))
                batch.bytes_read += len(chunk.data)
                cp = chunk.checkpoint
                if ahead:  # lines ahead of the clock: read again by a later pass
                    batch.ahead.append((path, ahead))
                if not chunk.data or ahead:
                    break  # only an incomplete line, a restart with nothing complete yet, or
                    # lines that wait for the clock
        except OSError as exc:
            batch.errors.append((path, exc.strerror or str(exc)))
        if local.requests:
            session = min(r.session for r in local.requests.values())
            batch.seen.append((path, session, tuple(local.requests)))
        batch.parsed.update(local)
        if local.counts.total or batch.bytes_read > before:
            batch.by_file.append((path, local.counts, batch.bytes_read - before))
        if cp is not None:
            batch.checkpoints.append(cp)
    return batch


def default_workers() -> int:
    """Parser processes when not configured: the CPU count, at most 8."""
    # Each worker holds a batch in memory (~40 MB): past 8 the disk is the limit anyway.
    return min(8, os.cpu_count() or 1)


Work = list[list[tuple[str, Checkpoint | None]]]
"""A pass's work units: each a list of (path, checkpoint to read on from)."""


def plan_units(paths: Sequence[str], cps: dict[str, Checkpoint], batch_bytes: int,
               unreadable: list[tuple[str, str]]) -> tuple[Work, int]:
    """Group the files of ``paths`` that changed since ``cps`` into work units; (units, bytes).

    Units hold about GROUP_BYTES, the first ones less (FIRST_GROUP_BYTES,
    doubling). A file that cannot be stat'ed goes into ``unreadable`` with why.
    """
    groups: Work = [[]]
    size = total = 0
    cap = min(batch_bytes, GROUP_BYTES, FIRST_GROUP_BYTES)
    for path in paths:
        try:
            st = os.stat(fs_path(path))
        except OSError as exc:
            unreadable.append((path, exc.strerror or str(exc)))
            continue
        cp = cps.get(path)
        if unchanged(st, cp):
            continue
        pending = st.st_size - (cp.offset if cp and cp.ino == st.st_ino else 0)
        if size and size + pending > cap:
            groups.append([])
            size = 0
            cap = min(cap * 2, batch_bytes, GROUP_BYTES)
        groups[-1].append((path, cp))
        size += max(pending, 0)
        total += max(pending, 0)
    return [g for g in groups if g], total


class Pooled:
    """Work units parsed by a pool of parser processes, as they are handed over."""

    def __init__(self, now: float, max_line_bytes: int, workers: int, parser_nice: int,
                 agents: Sequence[tuple[str, str]] = ()) -> None:
        """A pool of ``workers`` parser processes, forked with the first units handed over."""
        self._pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("fork"),
            initializer=die_with_parent, initargs=(os.getpid(), parser_nice))
        self._args = (now, max_line_bytes, tuple(agents))
        self._futures: list[Future[_Batch]] = []

    def submit(self, units: Work) -> list[Future[_Batch]]:
        """Hand units over; their futures (the first call forks the processes: make it alone)."""
        new = [self._pool.submit(read_files, g, *self._args) for g in units]
        self._futures += new
        return new

    def batches(self) -> Iterator[_Batch]:
        """Each unit's batch as it is done; the processes end with the last (or an error)."""
        try:
            for fut in as_completed(self._futures):
                # Each batch is let go once the caller is done with it, not all at the end:
                # the pass holds one batch at a time, and does not free them all at once
                # before its last transaction.
                self._futures.remove(fut)
                yield fut.result()
        finally:
            self.stop()

    def stop(self) -> None:
        """End the processes: units not begun are dropped, those under way finished first."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def pool_for(work: Work, total: int, *, now: float, max_line_bytes: int, workers: int,
             parser_nice: int, parallel_min_bytes: int,
             agents: Sequence[tuple[str, str]] = ()) -> Pooled | None:
    """A pool of parser processes for ``work``, or None where one costs more than it saves."""
    if workers < 2 or total < parallel_min_bytes or len(work) < 2:
        return None
    return Pooled(now, max_line_bytes, min(workers, len(work)), parser_nice, agents)


class Scanner(Generic[DestinationT]):
    """Runs ingestion passes over some transcript directories into a ledger."""

    def __init__(
        self,
        ledger: DestinationT,
        dirs: Sequence[Path],
        *,
        workers: int | None = None,
        on_applied: Callable[[Applied], None] | None = None,
        log: Any = None,
        parallel_min_bytes: int = PARALLEL_MIN_BYTES,
        batch_bytes: int = BATCH_BYTES,
        max_line_bytes: int = MAX_LINE_BYTES,
        clock: Callable[[], float] = time.time,
        parser_nice: int = PARSER_NICE,
        others: Sequence[Root] = (),
    ) -> None:
        """Set up passes; ``workers`` defaults to the CPU count, at most 8 (1: no pool).

        ``dirs`` are Claude Code's roots, ``others`` the roots of other agents'
        logs (exporter.ingest.formats). ``parser_nice``: how much lower the
        parser processes run (:data:`PARSER_NICE`).
        """
        self.parallel_min_bytes = parallel_min_bytes
        self.parser_nice = parser_nice
        self.batch_bytes = batch_bytes
        self.max_line_bytes = max_line_bytes
        self.clock = clock
        # The ledger's checkpoints, read on every full pass and kept current between
        # them, so that a pass over a few event paths does not load 100,000 rows.
        self._cps: dict[str, Checkpoint] | None = None
        self._known_files = 0
        self.ledger = ledger
        self.dirs = list(dirs)
        self.roots = [*(Root(d) for d in dirs), *others]
        self.workers = workers if workers is not None else default_workers()
        self.on_applied = on_applied
        if log is None:  # imported only then: structlog imports rich, slow to import
            import structlog  # noqa: PLC0415

            log = structlog.get_logger()
        self.log = log
        self._absent: set[str] = set()  # absent roots already logged

    def files(self) -> list[str]:
        """The transcript files present now."""
        # Resolved on every pass: a config root's projects/ may appear after start, and
        # then only it is read (not the root's other *.jsonl, such as history.jsonl).
        return find_transcripts(self._log_dirs(), self._problem)

    def _log_dirs(self) -> list[Path]:
        """The directories below the roots that hold logs, each agent's own."""
        return [d for root in self.roots for d in FORMATS[root.agent].log_dirs(root.path)]

    def _agents(self) -> tuple[tuple[str, str], ...]:
        """(log directory, agent) of the roots not Claude Code's: how a file's parser is chosen."""
        return tuple((os.path.abspath(d), root.agent) for root in self.roots
                     if root.agent != CLAUDE for d in FORMATS[root.agent].log_dirs(root.path))

    def scan(
        self, progress: Progress | None = None, paths: Collection[str] | None = None,
    ) -> ScanResult:
        """One pass: read everything new, commit it, return what happened.

        ``paths`` (what file events named: files or new directories) limits the
        pass to those; without it the pass walks every directory.
        """
        started = time.perf_counter()
        result = ScanResult()
        full = paths is None
        files = self.files() if paths is None else self._named(paths)
        work, total = self._plan(files, result, full)
        batches = self._run(work, total, self.clock())
        result.files = self._known_files
        done = 0
        pending: _Batch | None = None
        # Nobody watches the batches: a first pass may leave gaps, owners, rollups and
        # slots to its end (Ledger.bulk's raw pass).
        with gc_paused(), self.ledger.bulk(total // BYTES_PER_REQUEST,
                                           raw=self.on_applied is None):
            # A raw pass's commits are cheap: each group goes in as it comes, so the
            # ledger's work overlaps the parsing instead of waiting for 128 MB of it.
            most = min(self.batch_bytes, GROUP_BYTES) if self.ledger.raw else self.batch_bytes
            limit = min(most, FIRST_GROUP_BYTES) if self.ledger.raw else most
            for batch in batches:
                # Workers hand in small groups (load balance); the ledger takes them in
                # larger transactions: each commit has a fixed cost, and all are atomic.
                pending = batch if pending is None else pending.absorb(batch)
                if pending.bytes_read >= limit:
                    self._commit(pending, result)
                    pending = None
                    limit = min(limit * 2, most)
                done += batch.bytes_read
                if progress:
                    progress(min(done, total), total)
            if pending is not None:
                self._commit(pending, result)
        result.seconds = time.perf_counter() - started
        return result

    def _named(self, paths: Collection[str]) -> list[str]:
        """The transcripts among event paths: files as named, directories walked."""
        tops = [os.path.abspath(d) for d in self._log_dirs()]
        found: set[str] = set()
        for raw in paths:
            path = os.path.abspath(raw)
            if not any(path == t or path.startswith(t + os.sep) for t in tops):
                continue  # beside projects/ (history.jsonl, todos): not a transcript
            if os.path.isdir(path):
                found.update(canonical_key(fs_path(key), tops)
                             for key in find_transcripts([Path(path)], self._problem))
            elif path.endswith(".jsonl") and os.path.lexists(path):
                found.add(canonical_key(path, tops))  # one name per file, as walked
        return sorted(found)

    def _checkpoints(self, full: bool) -> dict[str, Checkpoint]:
        """The ledger's checkpoints: read on full passes, kept in memory between them."""
        if full or self._cps is None:
            self._cps = self.ledger.checkpoints()
        return self._cps

    def _plan(
        self, paths: list[str], result: ScanResult, full: bool = True,
    ) -> tuple[Work, int]:
        """Group the files that changed into work units of about GROUP_BYTES."""
        cps = self._checkpoints(full)
        result.checked = len(paths)
        if full:  # only a full walk can tell that a file is gone
            self._known_files = len(paths)
            present = set(paths)
            gone = [p for p in cps if p not in present and not os.path.exists(fs_path(p))]
            if gone:
                self.ledger.forget_files(gone)
                for p in gone:
                    cps.pop(p, None)
        else:
            self._known_files += sum(1 for p in paths if p not in cps)
        unreadable: list[tuple[str, str]] = []
        work, total = plan_units(paths, cps, self.batch_bytes, unreadable)
        self._unreadable(unreadable, result)
        return work, total

    def _unreadable(self, files: list[tuple[str, str]], result: ScanResult) -> None:
        """Say and count the files a plan could not stat, (path, why) each."""
        for path, why in files:
            self._problem("transcript_unreadable", path, why)
        result.unreadable += files

    def _run(self, work: Work, total: int, now: float) -> Iterator[_Batch]:
        """Yield each group's batch, from a process pool when it pays off."""
        limit = self.max_line_bytes
        agents = self._agents()
        pooled = pool_for(work, total, now=now, max_line_bytes=limit, workers=self.workers,
                          parser_nice=self.parser_nice, parallel_min_bytes=self.parallel_min_bytes,
                          agents=agents)
        if pooled is None:
            yield from (read_files(g, now, limit, agents) for g in work)
            return
        pooled.submit(work)
        yield from pooled.batches()

    def _commit(self, batch: _Batch, result: ScanResult) -> None:
        """Write one batch to the ledger and account for it."""
        for path, why in batch.errors:
            self._problem("transcript_unreadable", path, why)
        result.unreadable.extend(batch.errors)
        # Once, not per file (a getcwd each).
        tops = [os.path.abspath(root.path) for root in self.roots]
        agents = {top: root.agent for top, root in zip(tops, self.roots, strict=True)}
        seen = []
        for path, session, keys in batch.seen:
            root = _root_of(path, tops)
            seen.append(Appearance(path, root, session, keys, agents.get(root, CLAUDE)))
        by_root: RootLines = {}
        for path, counts, nbytes in batch.by_file:
            root = _root_of(path, tops)
            kept, before = by_root.get(root) or (LineCounts(), 0)
            kept.add(counts)
            by_root[root] = (kept, before + nbytes)
        applied = self.ledger.apply(batch.parsed, batch.checkpoints, batch.bytes_read, seen,
                                    by_root)
        if self._cps is not None:  # committed: the cache follows the ledger
            self._cps.update((cp.path, cp) for cp in batch.checkpoints)
        for path, reason in batch.rereads:
            self.log.info("transcript_reread", path=path, reason=reason)
        result.rereads += len(batch.rereads)
        # Kept by the ledger, too. A Codex turn without a model is counted, not said at each
        # pass: an old Codex build writes every turn so (docs/codex.md).
        if mended := sum(n for kind, n in batch.parsed.counts.mended.items()
                         if kind != MendKind.MODEL_ASSUMED):
            self.log.info("transcript_lines_mended", lines=mended)
        for path, lines in batch.ahead:  # said at each pass until the clock catches up
            self.log.warning("transcript_lines_ahead_of_clock", path=path, lines=lines)
        result.ahead += sum(lines for _, lines in batch.ahead)
        result.files_read += len(batch.checkpoints)
        result.bytes_read += batch.bytes_read
        result.new_requests += applied.new_count
        result.upgraded_requests += applied.upgraded_count
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


def _root_of(path: str, tops: Sequence[str]) -> str:
    """The deepest of ``tops`` (absolute transcript directories) that holds ``path``."""
    best = ""
    path = fs_path(path)  # a key of a name that is not UTF-8: compare the real path
    for root in tops:
        if (path.startswith(root.rstrip("/") + "/") or path == root) and len(root) > len(best):
            best = root
    return best
