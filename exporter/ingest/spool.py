"""The sample spool: what the status-line command records, one JSON line per refresh.

The command appends each record with one ``write`` on an ``O_APPEND`` file
descriptor, so concurrent Claude Code sessions never interleave partial lines;
:mod:`exporter.ledger.plan_store` moves the lines into the ledger. A record keeps only
the figures the exporter needs, each checked and bounded, never the whole
payload (no working directory, no transcript path):

``{"v":1,"t":<epoch s>,"session":…,"model":…,"version":…,
"windows":{"five_hour":[<used %>,<resets_at>],…},"context":[<used %>,<size>],"cost":<usd>}``

or, when the command could not record a sample, ``{"v":1,"t":…,"failure":<reason>}``.

This module is imported on every status-line refresh: standard library only,
and nothing slow to import (no ``re``, hence no ``json`` package: see
:mod:`exporter.ingest.jsonlite`; no ``pathlib``, no ``dataclasses``).
"""

from __future__ import annotations

import math
import os
import stat
import time

from exporter.ingest import jsonlite

# typing costs milliseconds to import and annotations are never evaluated here
# (postponed): mypy reads this block, the interpreter skips it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Final

FORMAT: Final = 1
SPOOL_NAME: Final = "plan-samples.jsonl"
RETIRED_NAME: Final = "plan-samples.jsonl.1"  # the previous spool, until fully ingested
TODAY_NAME: Final = "statusline-today.json"  # today's cost, written by the exporter
STATE_DIR_ENV: Final = "CLAUDE_CODE_EXPORTER_STATE_DIR"
#: The directory the status line and serve exchange through, when not the state dir
#: (a system service or a container: docs/plan-limits.md).
SPOOL_DIR_ENV: Final = "CLAUDE_CODE_EXPORTER_SPOOL_DIR"

MAX_LINE: Final = 16 * 1024  # a record is well under 2 KiB; a longer line is not ours
MAX_TEXT: Final = 200  # session id, model id, version: longer values are cut
MAX_WINDOWS: Final = 8
MAX_WINDOW_NAME: Final = 32
MAX_PERCENT: Final = 1000.0  # 105 % has been seen; anything far beyond is garbage
MAX_EPOCH: Final = 1e11
MAX_CONTEXT: Final = 10**9
MAX_COST: Final = 1e7
#: The spool stops growing here (months of refreshes): nobody is ingesting it.
MAX_SPOOL_BYTES: Final = 64 << 20

#: Why the status-line command recorded a failure instead of a sample.
FAILURE_REASONS: Final = (
    "empty",  # nothing on stdin
    "not_json",  # stdin is not JSON (or truncated JSON)
    "not_object",  # JSON, but not an object
    "too_large",  # more than MAX_PAYLOAD bytes
    "usage",  # bad command-line flags
    "then_failed",  # the wrapped command exited non-zero or printed nothing
    "then_timeout",  # the wrapped command did not finish in time
    "internal",  # an unexpected error in the command itself
)


def default_state_dir(environ: Mapping[str, str]) -> str:
    """The exporter's state directory: the one resolver, for the status line and the settings.

    ``CLAUDE_CODE_EXPORTER_STATE_DIR``, else ``$XDG_STATE_HOME/claude-code-exporter``,
    else ``~/.local/state/claude-code-exporter`` (exporter.cli.config's default).
    """
    explicit = environ.get(STATE_DIR_ENV, "").strip()
    if explicit:
        return os.path.expanduser(explicit)
    base = environ.get("XDG_STATE_HOME", "").strip()
    if not base:
        home = environ.get("HOME", "").strip() or os.path.expanduser("~")
        base = os.path.join(home, ".local", "state")
    return os.path.join(base, "claude-code-exporter")


def explicit_spool_dir(environ: Mapping[str, str]) -> str | None:
    """``CLAUDE_CODE_EXPORTER_SPOOL_DIR`` when set (a directory shared on purpose), else None."""
    explicit = environ.get(SPOOL_DIR_ENV, "").strip()
    return os.path.expanduser(explicit) if explicit else None


def local_midnight(now: float) -> float:
    """Epoch seconds of the most recent local midnight (DST-aware)."""
    tm = time.localtime(now)
    return time.mktime((tm.tm_year, tm.tm_mon, tm.tm_mday, 0, 0, 0, 0, 0, -1))


# ------------------------------------------------------------------ values


def number(value: Any, low: float, high: float) -> float | None:
    """A finite number in [low, high] (bools are not numbers), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and not low <= value <= high:
        return None  # before float(): a 400-digit integer would raise, and stall the spool
    out = float(value)
    if not math.isfinite(out) or not low <= out <= high:
        return None
    return out


def text(value: Any) -> str | None:
    """A non-empty string, cut to MAX_TEXT characters, else None."""
    if not isinstance(value, str) or not value:
        return None
    return value[:MAX_TEXT]


def window_name(value: Any) -> bool:
    """True for a plausible window name such as ``five_hour`` (lowercase, digits, ``_``)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_WINDOW_NAME
        and value.isascii()
        and all(c.islower() or c.isdigit() or c == "_" for c in value)
    )


def _window(value: Any) -> list[float | None] | None:
    """``[used %, resets_at]`` of one rate-limit window of the payload, or None."""
    if not isinstance(value, dict):
        return None
    pct = number(value.get("used_percentage"), 0.0, MAX_PERCENT)
    if pct is None:
        return None
    resets = number(value.get("resets_at"), 0.0, MAX_EPOCH)
    return [pct, None if resets is None else int(resets)]


def _windows(value: Any) -> dict[str, list[float | None]]:
    """The rate-limit windows of the payload (``rate_limits``), checked and bounded."""
    out: dict[str, list[float | None]] = {}
    if not isinstance(value, dict):
        return out
    for name, body in value.items():
        if len(out) >= MAX_WINDOWS:
            break
        if window_name(name):
            window = _window(body)
            if window is not None:
                out[name] = window
    return out


def _context(value: Any) -> list[float | None] | None:
    """``[used %, window size]`` of the payload's ``context_window``, or None."""
    if not isinstance(value, dict):
        return None
    pct = number(value.get("used_percentage"), 0.0, MAX_PERCENT)
    size = number(value.get("context_window_size"), 1.0, MAX_CONTEXT)
    if pct is None and size is None:
        return None
    return [pct, None if size is None else int(size)]


# ----------------------------------------------------------------- records


def sample_record(payload: Mapping[str, Any], t: float) -> dict[str, Any]:
    """The spool record of one status-line payload received at ``t``."""
    rec: dict[str, Any] = {"v": FORMAT, "t": round(t, 6)}
    session = text(payload.get("session_id"))
    if session is not None:
        rec["session"] = session
    model = payload.get("model")
    model_id = text(model.get("id")) if isinstance(model, dict) else text(model)
    if model_id is not None:
        rec["model"] = model_id
    version = text(payload.get("version"))
    if version is not None:
        rec["version"] = version
    windows = _windows(payload.get("rate_limits"))
    if windows:
        rec["windows"] = windows
    context = _context(payload.get("context_window"))
    if context is not None:
        rec["context"] = context
    cost = payload.get("cost")
    usd = number(cost.get("total_cost_usd"), 0.0, MAX_COST) if isinstance(cost, dict) else None
    if usd is not None:
        rec["cost"] = usd
    return rec


def failure_record(reason: str, t: float) -> dict[str, Any]:
    """The spool record of a refresh that produced no sample."""
    return {"v": FORMAT, "t": round(t, 6), "failure": reason}


def check_record(obj: Any) -> dict[str, Any] | None:
    """A spool record re-checked on the way in (the file is ours, but files get damaged).

    Returns the record in canonical form (only known keys, valid values) or None.
    """
    if not isinstance(obj, dict) or obj.get("v") != FORMAT:
        return None
    t = number(obj.get("t"), 0.0, MAX_EPOCH)
    if t is None:
        return None
    if "failure" in obj:
        reason = obj["failure"]
        return failure_record(reason, t) if reason in FAILURE_REASONS else None
    return _check_sample(obj, t)


_SAMPLE_FIELDS: Final = ("session", "model", "version", "windows", "context", "cost")


def _check_sample(obj: dict[str, Any], t: float) -> dict[str, Any] | None:
    """The canonical form of a spooled sample, or None if any field is malformed."""
    out: dict[str, Any] = {"v": FORMAT, "t": t}
    for key in _SAMPLE_FIELDS:
        if key not in obj:
            continue
        raw = obj[key]
        value: Any
        if key == "windows":
            value = _spooled_windows(raw)
        elif key == "context":
            value = _spooled_pair(raw, MAX_PERCENT, MAX_CONTEXT)
        elif key == "cost":
            value = number(raw, 0.0, MAX_COST)
        else:
            value = text(raw)
        if value is None:
            return None
        out[key] = value
    return out


def _spooled_windows(value: Any) -> dict[str, list[float | None]] | None:
    """The ``windows`` of a spooled record, or None when malformed."""
    if not isinstance(value, dict) or len(value) > MAX_WINDOWS:
        return None
    out: dict[str, list[float | None]] = {}
    for name, pair in value.items():
        checked = _spooled_pair(pair, MAX_PERCENT, MAX_EPOCH) if window_name(name) else None
        if checked is None or checked[0] is None:
            return None
        out[name] = checked
    return out


def _spooled_pair(value: Any, first_max: float, second_max: float) -> list[float | None] | None:
    """A ``[number|null, number|null]`` pair within bounds, or None when malformed."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    first = None if value[0] is None else number(value[0], 0.0, first_max)
    second = None if value[1] is None else number(value[1], 0.0, second_max)
    if (value[0] is not None and first is None) or (value[1] is not None and second is None):
        return None
    return [first, None if second is None else int(second)]


# --------------------------------------------------------------------- I/O


def encode(rec: Mapping[str, Any]) -> bytes:
    """One spool line (compact JSON and a newline)."""
    return jsonlite.dumps(rec).encode() + b"\n"


class SpoolFullError(OSError):
    """The spool reached MAX_SPOOL_BYTES: the exporter is not moving it into the ledger."""


def append(state_dir: str, records: list[dict[str, Any]], *, shared: bool = False) -> None:
    """Append records to the spool in one write; raise OSError on any failure.

    ``shared``: a spool dir set on purpose for another account's ``serve``: a new
    spool takes the group bits (the umask, or the directory's default ACL, whose
    mask they become, decides who shares it); else it is owner-only.

    One ``write`` on an ``O_APPEND`` descriptor: concurrent writers never
    interleave inside a line. A short write (full disk) is an error; the torn
    line it leaves is rejected, and counted, by the ingest. A spool past
    MAX_SPOOL_BYTES is left alone (SpoolFullError): disk use stays bounded when no
    exporter runs.
    """
    data = b"".join(encode(r) for r in records)
    path = os.path.join(state_dir, SPOOL_NAME)
    # O_NONBLOCK: a FIFO in the spool's place fails at once (ENXIO) instead of
    # blocking the status line until a reader comes; a regular file ignores it.
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
    mode = 0o660 if shared else 0o600
    try:
        fd = os.open(path, flags, mode)
    except FileNotFoundError:
        # Token counts and session ids are private: an owner-only directory, as the ledger's.
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        fd = os.open(path, flags, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO with a reader, a link to /dev/null or a tty
            raise OSError(f"{path} is not a regular file")
        if st.st_size + len(data) > MAX_SPOOL_BYTES:
            raise SpoolFullError(28, f"{path} reached {MAX_SPOOL_BYTES} bytes")
        written = os.write(fd, data)
    finally:
        os.close(fd)
    if written != len(data):
        raise OSError(28, f"short write to {path} ({written} of {len(data)} bytes)")


def read_today(state_dir: str, now: float) -> float | None:
    """Today's list-price cost as last published by the exporter, or None.

    None when the file is missing, damaged, or about another day (or another
    time zone: the exporter and the status line must agree on midnight).
    """
    try:
        doc = jsonlite.loads(read_regular(os.path.join(state_dir, TODAY_NAME), 4096).decode())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("v") != FORMAT:
        return None
    since = number(doc.get("since"), 0.0, MAX_EPOCH)
    usd = number(doc.get("usd"), 0.0, MAX_COST)
    if since is None or usd is None or abs(since - local_midnight(now)) > 1.0:
        return None
    return usd


def read_regular(path: str, limit: int) -> bytes:
    """Up to ``limit`` bytes of a regular file; OSError for anything else, at once.

    Opened without blocking: a FIFO in the file's place would otherwise hang
    the status line until a writer came; a directory or a device (a link to
    /dev/zero) is refused after ``fstat``, and one bounded read ends it.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.read(fd, limit)
    finally:
        os.close(fd)


def write_today(state_dir: str, since: float, usd: float, now: float) -> None:
    """Publish today's cost for the status line: write a temporary file, then rename it.

    Group-readable as far as the umask or the directory's default ACL allow: in a
    spool dir shared with a system service, the user's status line reads it.
    """
    doc = {"v": FORMAT, "since": since, "usd": round(usd, 6), "written": round(now, 3)}
    path = os.path.join(state_dir, TODAY_NAME)
    tmp = f"{path}.{os.getpid()}.tmp"
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NONBLOCK,
                 0o640)
    try:
        os.write(fd, jsonlite.dumps(doc).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
