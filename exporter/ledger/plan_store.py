"""Moving status-line samples from the spool into the ledger, exactly once.

:func:`ingest_samples` runs inside the ledger's write path (in the caller's
transaction, or its own): it reads the spool from the offset committed in
the ledger, stores each new sample, and commits the new offset in the same
transaction, so a kill -9 at any moment leaves either all of a batch or none
of it. A sample's key is a hash of its content without its time, so the same
payload recorded twice (Claude Code refreshes the status line with unchanged
figures, or a spool is read twice) is stored once, with the first and last
time it was seen.

Other agents' windows, read with their transcripts (Codex's ``rate_limits``),
go into the same tables through :func:`write_sample`
(exporter.ledger.agent_limits), under their ``agent`` (the status line's:
``claude``, part of a window instance's key).

Tables (all ``plan_*``, created if missing):

- ``plan_samples``: every distinct sample, the history;
- ``plan_levels``: per window instance (window, resets_at) and percentage, the
  first time that percentage was seen: the change points the estimate uses;
- ``plan_windows``: per window instance, the highest percentage, when seen, and the
  reset time as reported (the key is rounded to the minute);
- ``plan_meta``: the newest sample (another agent's: ``latest_sample:<agent>``) and
  the newest context-window figure;
- ``plan_counters``: samples stored (another agent's: labelled by it), status-line
  failures, rejected spool lines (another agent's readings: ``<agent>_rejected``);
- ``plan_spool``: how far each spool file (by device, inode, first bytes) was read.

All upserts take minima and maxima, so the order samples arrive in never
matters. The spool is rotated once it is fully read and 1 MiB long: renamed to
``plan-samples.jsonl.1``, which is read to its end once more and deleted when
no writer has touched it for a minute.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from exporter.ingest import plausible, spool
from exporter.ledger import connections
from exporter.ledger.schema import PLAN_TABLES, migrate_plan
from exporter.records import CLAUDE_AGENT
from exporter.sqlite import sqlite3

ROTATE_BYTES: Final = 1 << 20
RETIRED_GRACE_S: Final = 60.0  # a writer that opened the old name before the rename is done
READ_CHUNK: Final = 1 << 20
MAX_READ: Final = 64 << 20  # per call; ``Ingested.more`` says there is more
FP_LEN: Final = 64  # first bytes identifying a spool file (its first record has a µs time)
RESETS_QUANTUM: Final = 60  # window instances: resets_at to the minute, absorbing jitter
CLAUDE: Final = CLAUDE_AGENT  # the agent of the status line's samples (plan tables' ``agent``)

#: Why a spool line was rejected (``window_cap``: cut, see exporter.ingest.plausible).
REJECT_REASONS: Final = ("too_long", "not_json", "bad_record", *plausible.REASONS)


@dataclass(slots=True)
class Ingested:
    """What one call moved: new and repeated samples, failures, rejected lines, bytes."""

    new: int = 0
    repeated: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    bytes_read: int = 0
    more: bool = False  # MAX_READ was reached: call again


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the plan tables if missing, or bring them to v5 (safe inside a transaction)."""
    migrate_plan(conn)
    for statement in PLAN_TABLES:
        conn.execute(statement)


def has_schema(conn: sqlite3.Connection) -> bool:
    """Whether the plan tables exist in v5's shape (readers never create them).

    Tables of the shape before (a ledger its writer has not brought up yet)
    read as none until it does.
    """
    row = conn.execute(
        "SELECT count(*) FROM pragma_table_info('plan_windows') WHERE name = 'agent'"
    ).fetchone()
    return bool(row[0])


def ingest_samples(
    conn: sqlite3.Connection,
    spool_dir: str | os.PathLike[str] | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> Ingested:
    """Move new spool lines into the ledger; the spool offsets commit with them.

    Runs in the caller's open transaction when there is one (the ledger's
    write path), else in its own ``BEGIN IMMEDIATE`` … ``COMMIT``. File
    renames and deletions happen under that write lock, so two processes
    ingesting at once cannot both act on the same file. ``spool_dir`` defaults
    to the ledger file's directory (the state directory).
    """
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN IMMEDIATE")
    try:
        ensure_schema(conn)
        directory = os.fspath(spool_dir) if spool_dir is not None else _db_dir(conn)
        result = _Ingest(conn, directory, clock()).run()
        if own:
            conn.execute("COMMIT")
    except BaseException:
        if own and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def ingest_spool(
    ledger_path: str | os.PathLike[str],
    state_dir: str | os.PathLike[str],
    *,
    clock: Callable[[], float] = time.time,
) -> Ingested:
    """Move every new spool line into the ledger, on a connection of its own (the writer's).

    What ``report`` and ``backfill`` do when they write the ledger (no ``serve``
    runs): samples recorded while no daemon ran are in their figures too.
    Nothing is opened, and no plan table created, while the status line never
    recorded anything.
    """
    directory = os.fspath(state_dir)
    if not any(os.path.exists(os.path.join(directory, name))
               for name in (spool.SPOOL_NAME, spool.RETIRED_NAME)):
        return Ingested()
    total = Ingested()
    conn = connections.plan_writer(ledger_path)
    try:
        while True:  # a large backlog comes in bounded reads
            part = ingest_samples(conn, directory, clock=clock)
            total.new += part.new
            total.repeated += part.repeated
            total.bytes_read += part.bytes_read
            for mine, theirs in ((total.failures, part.failures), (total.rejected, part.rejected)):
                for reason, n in theirs.items():
                    mine[reason] = mine.get(reason, 0) + n
            if not part.more:
                return total
    finally:
        conn.close()


def _db_dir(conn: sqlite3.Connection) -> str:
    """The directory of the connection's main database file."""
    for _seq, name, path in conn.execute("PRAGMA database_list"):
        if name == "main" and path:
            return os.path.dirname(str(path))
    raise ValueError("the ledger connection has no file: pass spool_dir")


@dataclass(slots=True)
class _File:
    """One spool file as found on disk, and how far the ledger has read it."""

    path: str
    dev: int
    ino: int
    size: int
    mtime: float
    fp: str  # hex of its first bytes, up to FP_LEN
    offset: int  # committed offset (0 for a file the ledger has not seen)


class _Ingest:
    """One ingest pass over the spool files of a directory."""

    def __init__(self, conn: sqlite3.Connection, directory: str, now: float) -> None:
        self.conn = conn
        self.active = os.path.join(directory, spool.SPOOL_NAME)
        self.retired = os.path.join(directory, spool.RETIRED_NAME)
        self.now = now
        self.out = Ingested()
        self.budget = MAX_READ
        self._admitted: set[str] | None = None  # other window names stored (plausible)

    def run(self) -> Ingested:
        """Rotate or delete finished files, read what is new, forget vanished files."""
        retired = self._find(self.retired)
        if retired is not None and self._done(retired, grace=True):
            _unlink(retired.path)
            self._forget(retired)
            retired = None
        active = self._find(self.active)
        if (retired is None and active is not None and active.size >= ROTATE_BYTES
                and self._done(active, grace=False) and _rename(self.active, self.retired)):
            retired, active = active, None
            retired.path = self.retired
        for found in (retired, active):
            if found is not None:
                self._read(found)
        keep = {(f.dev, f.ino) for f in (self._find(self.retired), self._find(self.active)) if f}
        for dev, ino in self.conn.execute("SELECT dev, ino FROM plan_spool").fetchall():
            if (dev, ino) not in keep:
                self.conn.execute("DELETE FROM plan_spool WHERE dev = ? AND ino = ?", (dev, ino))
        return self.out

    # ------------------------------------------------------------- files
    def _find(self, path: str) -> _File | None:
        """The file at ``path`` with its committed offset, or None if absent."""
        try:
            with _open_regular(path) as fh:
                st = os.fstat(fh.fileno())
                head = fh.read(FP_LEN)
        except OSError:
            return None
        fp = head.hex()
        row = self.conn.execute(
            "SELECT fp, offset FROM plan_spool WHERE dev = ? AND ino = ?", (st.st_dev, st.st_ino)
        ).fetchone()
        offset = 0
        # Same inode and the same first bytes: the file we read (an inode can be reused).
        if row is not None and fp.startswith(row[0]) and row[1] <= st.st_size:
            offset = row[1]
        return _File(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime, fp, offset)

    def _done(self, found: _File, *, grace: bool) -> bool:
        """Fully read (and, with ``grace``, untouched for RETIRED_GRACE_S)."""
        if found.offset < found.size:
            return False
        return not grace or self.now - found.mtime >= RETIRED_GRACE_S

    def _forget(self, found: _File) -> None:
        """Drop a deleted file's offset."""
        self.conn.execute(
            "DELETE FROM plan_spool WHERE dev = ? AND ino = ?", (found.dev, found.ino)
        )

    def _read(self, found: _File) -> None:
        """Ingest the complete lines after the committed offset; commit the new offset."""
        offset = found.offset
        try:
            with _open_regular(found.path) as fh:
                if os.fstat(fh.fileno()).st_ino != found.ino:
                    return  # replaced since _find: the next pass reads it
                fh.seek(offset)
                while self.budget > 0:
                    chunk = fh.read(min(READ_CHUNK, self.budget))
                    if not chunk:
                        break
                    used = self._lines(chunk)
                    if used == 0:
                        break  # an incomplete last line: wait for its end
                    offset += used
                    self.budget -= used
                    self.out.bytes_read += used
                    if used < len(chunk):
                        fh.seek(offset)
        except OSError:
            pass  # unreadable now: what was read so far still commits
        self.out.more = self.out.more or self.budget <= 0
        self.conn.execute(
            "INSERT OR REPLACE INTO plan_spool VALUES (?, ?, ?, ?)",
            (found.dev, found.ino, found.fp, offset),
        )

    def _lines(self, chunk: bytes) -> int:
        """Ingest the complete lines of ``chunk``; return the bytes consumed."""
        end = chunk.rfind(b"\n")
        if end < 0:
            if len(chunk) < spool.MAX_LINE:
                return 0
            self._reject("too_long")  # no newline in sight: skip it, resynchronise later
            return len(chunk)
        for line in chunk[:end].split(b"\n"):
            self._line(line)
        return end + 1

    # ------------------------------------------------------------ records
    def _line(self, line: bytes) -> None:
        """Ingest one spool line (empty lines are skipped silently)."""
        if not line.strip():
            return
        if len(line) > spool.MAX_LINE:
            self._reject("too_long")
            return
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            self._reject("not_json")
            return
        rec = spool.check_record(obj)
        if rec is None:
            self._reject("bad_record")
        elif "failure" in rec:
            reason = rec["failure"]
            self._count("statusline_failures", reason, 1)
            self.out.failures[reason] = self.out.failures.get(reason, 0) + 1
        else:
            self._store_if_plausible(rec)

    def _store_if_plausible(self, rec: dict[str, Any]) -> None:
        """Store a well-formed sample unless it cannot be true; cap its window names."""
        reason = plausible.rejection(rec)
        if reason is not None:
            self._reject(reason)
            return
        if "windows" in rec:
            if self._admitted is None:
                self._admitted = admitted_names(self.conn, CLAUDE)
            rec["windows"], dropped = plausible.admit_windows(rec["windows"], self._admitted)
            if dropped:
                self._reject("window_cap")  # counted; the sample's other figures are kept
            if not rec["windows"]:
                del rec["windows"]
        # A sample that still cannot be stored (a value SQLite's binding refuses) is
        # rejected alone, never the batch. Its free text is bound by _sample's first
        # statement, so a refusal there writes nothing; the later ones bind only
        # checked numbers and ASCII window names (no savepoint per sample: two more
        # statements on every sample, for a case the checks above exclude).
        try:
            self._sample(rec)
        except (ValueError, TypeError, OverflowError):
            self._reject("bad_record")

    def _reject(self, reason: str) -> None:
        """Count a spool line that is not a record."""
        self._count("spool_rejected", reason, 1)
        self.out.rejected[reason] = self.out.rejected.get(reason, 0) + 1

    def _count(self, name: str, label: str, n: int) -> None:
        """Add to a persistent counter."""
        count(self.conn, name, label, n)

    def _sample(self, rec: dict[str, Any]) -> None:
        """Store one sample (or note the repeat of a known one) and its derived rows."""
        t = rec.pop("t")
        if write_sample(self.conn, rec, t):
            self.out.new += 1
            self._count("samples", "", 1)
        else:
            self.out.repeated += 1
        context = rec.get("context") or [None, None]
        if context[0] is not None:
            latest(self.conn, "latest_context", t, context[0])


def write_sample(conn: sqlite3.Connection, rec: dict[str, Any], t: float,
                 agent: str = CLAUDE) -> bool:
    """Store one sample seen at ``t`` and its window rows; True when it is new.

    A known sample (same content, any time) widens its first and last time.
    ``agent``: whose windows these are (the status line's: "claude").
    """
    key = sample_key(rec)
    windows = rec.get("windows", {})
    context = rec.get("context") or [None, None]
    cur = conn.execute(
        "INSERT OR IGNORE INTO plan_samples (key, first_seen, last_seen, session, model, "
        "version, context_pct, context_size, session_cost_usd, windows, agent) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (key, t, t, rec.get("session"), rec.get("model"), rec.get("version"), context[0],
         context[1], rec.get("cost"), json.dumps(windows, sort_keys=True) if windows else None,
         agent),
    )
    new = cur.rowcount == 1
    if not new:
        conn.execute(
            "UPDATE plan_samples SET first_seen = min(first_seen, ?), "
            "last_seen = max(last_seen, ?) WHERE key = ?",
            (t, t, key),
        )
    for name, (pct, resets) in windows.items():
        if resets is not None:  # else it cannot be placed in a window instance
            _window_rows(conn, agent, name, (pct, resets), t)
    latest(conn, latest_name(agent), t, 0.0)
    return new


_LEVEL_UPSERT: Final = (
    "INSERT INTO plan_levels (agent, window, resets_at, pct, first_seen) VALUES (?,?,?,?,?) "
    "ON CONFLICT (agent, window, resets_at, pct) "
    "DO UPDATE SET first_seen = min(first_seen, excluded.first_seen)")
_INSTANCE_UPSERT: Final = (
    "INSERT INTO plan_windows (agent, window, resets_at, max_pct, first_seen, last_seen, "
    "reported_resets_at) VALUES (?,?,?,?,?,?,?) "
    "ON CONFLICT (agent, window, resets_at) "
    "DO UPDATE SET max_pct = max(max_pct, excluded.max_pct), "
    "first_seen = min(first_seen, excluded.first_seen), "
    "last_seen = max(last_seen, excluded.last_seen), "
    "reported_resets_at = max(reported_resets_at, excluded.reported_resets_at)")


def _window_rows(conn: sqlite3.Connection, agent: str, name: str,
                 figure: tuple[float, float], t: float) -> None:
    """A window figure seen at ``t``: its level's first sighting, its instance's extremes."""
    pct, resets = figure
    instance = window_instance(resets)
    write_levels(conn, [(agent, name, instance, pct, t)])
    write_instances(conn, [(agent, name, instance, pct, t, t, resets)])


def write_levels(conn: sqlite3.Connection,
                 rows: Sequence[tuple[str, str, int, float, float]]) -> None:
    """Levels (agent, window, instance, %, first seen): each level's first sighting kept."""
    conn.executemany(_LEVEL_UPSERT, rows)


def write_instances(conn: sqlite3.Connection,
                    rows: Sequence[tuple[str, str, int, float, float, float, float]]) -> None:
    """Instances (agent, window, instance, max %, first, last, reported reset): extremes kept."""
    conn.executemany(_INSTANCE_UPSERT, rows)


def latest_name(agent: str) -> str:
    """The ``plan_meta`` name of an agent's latest sample time."""
    return "latest_sample" if agent == CLAUDE else f"latest_sample:{agent}"


def latest(conn: sqlite3.Connection, name: str, t: float, value: float) -> None:
    """Keep the value with the greatest time under ``name`` (ties: the greater value)."""
    conn.execute(
        "INSERT INTO plan_meta VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
        "t = excluded.t, value = excluded.value WHERE excluded.t > plan_meta.t "
        "OR (excluded.t = plan_meta.t AND excluded.value > plan_meta.value)",
        (name, t, value),
    )


def admitted_names(conn: sqlite3.Connection, agent: str) -> set[str]:
    """The other (not known) window names stored for ``agent`` (plausible's cap)."""
    return {name for (name,) in conn.execute(
        "SELECT DISTINCT window FROM plan_windows WHERE agent = ?", (agent,))
        if name not in plausible.KNOWN_WINDOWS}


def count(conn: sqlite3.Connection, name: str, label: str, n: int) -> None:
    """Add to a persistent plan counter."""
    conn.execute(
        "INSERT INTO plan_counters VALUES (?, ?, ?) ON CONFLICT (name, label) "
        "DO UPDATE SET value = value + excluded.value",
        (name, label, n),
    )


def sample_key(rec: dict[str, Any]) -> str:
    """The identity of a sample: a hash of its canonical content without its time."""
    body = json.dumps({k: v for k, v in rec.items() if k != "t"}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


def window_instance(resets_at: float) -> int:
    """The key of a window instance: its reset time to the nearest minute."""
    return round(resets_at / RESETS_QUANTUM) * RESETS_QUANTUM


def _open_regular(path: str) -> Any:
    """``path`` opened for reading without blocking; OSError unless it is a regular file.

    A FIFO put in the spool's place would block a plain ``open`` until some
    writer came; a device (a link to /dev/zero) never ends.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _rename(src: str, dst: str) -> bool:
    """Rename, reporting success (a vanished file is not an error)."""
    try:
        os.rename(src, dst)
    except OSError:
        return False
    return True


def _unlink(path: str) -> None:
    """Delete if still there."""
    with contextlib.suppress(OSError):
        os.unlink(path)
