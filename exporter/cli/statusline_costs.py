"""Today's cost without a daemon: the status line's own book of Claude Code's session costs.

Claude Code passes each session's running cost (``cost.total_cost_usd``) on
every refresh. The status line keeps, per local day and session, where that
figure stood when the day began for the session (``base``), the last figure
seen (``last``) and what earlier processes of the session spent today
(``carried``); today's cost is the sum over the day's sessions of
``carried + last - base``. One small file per session and day,
``<state>/statusline-days/<midnight epoch>/<session key>.json``, replaced
atomically, so concurrent sessions never write the same file and a refresh
costs one directory listing and one small read per session of the day.

A figure below half the last one is a new Claude Code process for the same
session (a restart that did not restore the cost): what the earlier process
spent is kept in ``carried``. A figure slightly below the last is a refresh
that finished late, and changes nothing.

Imported on every refresh: standard library only, nothing slow to import.
"""

from __future__ import annotations

import os
import stat

from exporter.ingest import jsonlite, spool

TYPE_CHECKING = False  # typing is not imported at run time (see exporter.ingest.spool)
if TYPE_CHECKING:
    from typing import Final

BOOK_DIR: Final = "statusline-days"
KEEP_DAYS: Final = 35  # a session resumed within this many days continues from its figure
MAX_SESSIONS: Final = 5000  # entries read per day: the sum stays bounded whatever the dir holds
MAX_ENTRY: Final = 512
MAX_KEY: Final = 128
_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_SUFFIX: Final = ".json"


def session_key(session: str) -> str:
    """A file name for a session id: the id when plain (UUIDs are), else its UTF-8 in hex."""
    if session and len(session) <= MAX_KEY and set(session) <= _SAFE:
        return session
    return "x" + session.encode("utf-8", "surrogatepass")[: MAX_KEY // 2].hex()


def record(state_dir: str, session: str, cost: float, now: float) -> float:
    """Book ``cost`` as ``session``'s figure at ``now``; return today's total of every session.

    Raises OSError when the book cannot be written (the caller shows no today figure).
    """
    midnight = int(spool.local_midnight(now))
    book = os.path.join(state_dir, BOOK_DIR)
    day = os.path.join(book, str(midnight))
    key = session_key(session) + _SUFFIX
    entry = _read_entry(os.path.join(day, key))
    if entry is None:
        before = _earlier_figure(book, midnight, key)
        entry = [before if before is not None and cost >= before else 0.0, cost, 0.0]
    else:
        entry = _advance(entry, cost)
    os.makedirs(day, mode=0o700, exist_ok=True)
    _write_entry(os.path.join(day, key), entry)
    _prune_one(book, midnight - KEEP_DAYS * 86_400)
    return _spent(entry) + _others(day, key)


def _advance(entry: list[float], cost: float) -> list[float]:
    """The entry after a new figure: higher moves ``last``, far lower starts a new process."""
    base, last, carried = entry
    if cost >= last:
        return [base, cost, carried]
    if cost < last / 2:
        return [0.0, cost, carried + last - base]
    return entry  # a late refresh: an older figure than the one already booked


def _spent(entry: list[float]) -> float:
    """What an entry's session spent today."""
    base, last, carried = entry
    return carried + max(0.0, last - base)


def _read_entry(path: str) -> list[float] | None:
    """``[base, last, carried]`` of a book file, or None when missing or not ours."""
    try:
        doc = jsonlite.loads(spool.read_regular(path, MAX_ENTRY).decode())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    values = [spool.number(doc.get(k), 0.0, spool.MAX_COST) for k in ("base", "last", "carried")]
    if None in values:
        return None
    return [float(v) for v in values if v is not None]


def _write_entry(path: str, entry: list[float]) -> None:
    """Replace a book file atomically (a temporary file of this process, then rename)."""
    base, last, carried = entry
    data = jsonlite.dumps({"base": base, "last": last, "carried": carried}).encode()
    tmp = f"{path}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
    fd = os.open(tmp, flags, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{tmp} is not a regular file")
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _days(book: str) -> list[int]:
    """The day directories of the book, as midnight epochs (other names ignored)."""
    try:
        names = os.listdir(book)
    except OSError:
        return []
    return [int(n) for n in names if n.isdigit() and len(n) <= 12]


def _earlier_figure(book: str, midnight: int, key: str) -> float | None:
    """The session's last figure on an earlier day (newest first), or None for a new session."""
    for day in sorted((d for d in _days(book) if d < midnight), reverse=True):
        entry = _read_entry(os.path.join(book, str(day), key))
        if entry is not None:
            return entry[1]
    return None


def _others(day: str, own: str) -> float:
    """Today's spending of every other session of the day (at most MAX_SESSIONS entries)."""
    total = 0.0
    with os.scandir(day) as entries:
        for n, item in enumerate(entries):
            if n >= MAX_SESSIONS:
                break
            if item.name == own or not item.name.endswith(_SUFFIX):
                continue
            entry = _read_entry(item.path)
            if entry is not None:
                total += _spent(entry)
    return total


def _prune_one(book: str, before: int) -> None:
    """Remove one day directory older than ``before`` (bounded work per refresh)."""
    old = [d for d in _days(book) if d < before]
    if not old:
        return
    day = os.path.join(book, str(min(old)))
    try:
        with os.scandir(day) as entries:
            for n, item in enumerate(entries):
                if n >= MAX_SESSIONS:
                    return  # the rest on a later refresh
                if item.is_file(follow_symlinks=False) or item.is_symlink():
                    os.unlink(item.path)
        os.rmdir(day)
    except OSError:
        return  # not ours to remove (a directory inside, permissions): left as it is
