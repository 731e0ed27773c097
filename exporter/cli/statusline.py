"""``claude-code-exporter statusline``: Claude Code's status-line command, recording plan limits.

Set as Claude Code's ``statusLine`` command, it runs on every refresh with the
session's JSON on stdin. It appends one sample (the rate-limit windows, the
context window, session, model and version; see :mod:`exporter.ingest.spool`)
to the state directory and prints one line::

    Opus 4.6 · ctx 42% · 5h 35% ↻2h30m · 7d 17% · today $12.34

``--then CMD`` runs the user's own status-line command with the same stdin and
prints its output instead. Whatever happens (no input, bad JSON, an unwritable
state directory, a full disk, a failing ``--then`` command) it prints a line and
exits 0, because a failing command blanks Claude Code's status line; failures
it can record are counted in the spool for the exporter to expose.

Imported on every refresh, so it imports nothing heavy: no OpenTelemetry,
pydantic, rich or argparse, not even ``re`` (``--then`` alone loads
subprocess, when given).
"""

from __future__ import annotations

import os
import sys
import time

from exporter.cli import statusline_costs
from exporter.ingest import jsonlite, spool

TYPE_CHECKING = False  # as in exporter.ingest.spool: typing is not imported at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, BinaryIO, Final

MAX_STDIN: Final = 16 * 1024 * 1024  # read at most this much (passed through to --then)
MAX_PAYLOAD: Final = 4 * 1024 * 1024  # parse at most this much; Claude Code sends ~2 KB
THEN_TIMEOUT: Final = 5.0
SEPARATOR: Final = " · "
FALLBACK: Final = "Claude Code"

USAGE: Final = """\
usage: claude-code-exporter statusline [--then CMD] [--then-timeout SECONDS]
                                       [--spool-dir DIR | --state-dir DIR]
       claude-code-exporter statusline --install|--uninstall [--dry-run] [flags to keep]

Claude Code status-line command: records the plan-limit figures Claude Code passes
on stdin and prints model · context · 5h · 7d · the session's and today's cost.

  --install              set it as Claude Code's status line: writes the statusLine
                         entry, with this command's absolute path, into
                         $CLAUDE_CONFIG_DIR/settings.json (else ~/.claude/settings.json),
                         keeping every other key and a backup; a status line of your
                         own is kept through --then. Running it twice changes nothing
  --uninstall            take the entry out again (your own status line restored)
  --dry-run              with either: print what would be written, change nothing
  --then CMD             run CMD (your own status-line command) with the same stdin
                         and print its output instead of ours
  --then-timeout SECONDS give up on CMD after this long (default 5)
  --spool-dir DIR        where samples go when serve runs under another account or
                         in a container: the directory given to serve as
                         CLAUDE_CODE_EXPORTER_SPOOL_DIR (default: that variable, else
                         the state dir below); new files there are group-shareable
  --state-dir DIR        where samples go, the state dir of serve (default
                         $CLAUDE_CODE_EXPORTER_STATE_DIR, else $XDG_STATE_HOME/
                         claude-code-exporter, else ~/.local/state/claude-code-exporter)

It always prints a line and exits 0 (docs/plan-limits.md).
"""


SWITCHES: Final = ("--install", "--uninstall", "--dry-run")


class _Options:
    """Parsed flags."""

    def __init__(self) -> None:
        self.then: str | None = None
        self.then_timeout = THEN_TIMEOUT
        self.state_dir: str | None = None
        self.spool_dir: str | None = None
        self.help = False
        self.install = False
        self.uninstall = False
        self.dry_run = False
        self.kept: list[str] = []  # the flags an installed command line carries


class UsageError(Exception):
    """A bad command line (shown in the status line itself, where it will be seen)."""


def parse_args(argv: Sequence[str]) -> _Options:
    """The flags (hand-parsed: argparse is too slow to import on every refresh)."""
    opts = _Options()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            opts.help = True
            continue
        if arg in SWITCHES:
            setattr(opts, arg[2:].replace("-", "_"), True)
            continue
        name, eq, value = arg.partition("=")
        if name not in ("--then", "--then-timeout", "--state-dir", "--spool-dir"):
            raise UsageError(f"unknown option {arg!r}")
        if not eq:
            if not args:
                raise UsageError(f"{name} needs a value")
            value = args.pop(0)
        _take(opts, name, value)
    if opts.install and opts.uninstall:
        raise UsageError("--install and --uninstall exclude each other")
    if opts.dry_run and not (opts.install or opts.uninstall):
        raise UsageError("--dry-run goes with --install or --uninstall")
    return opts


def _take(opts: _Options, name: str, value: str) -> None:
    """Set the option ``name`` (one taking a value) from ``value``."""
    opts.kept += [name, value]
    if name == "--then":
        opts.then = value
    elif name == "--state-dir":
        opts.state_dir = value
    elif name == "--spool-dir":
        opts.spool_dir = value
    else:
        try:
            opts.then_timeout = float(value)
        except ValueError:
            raise UsageError(f"--then-timeout {value!r} is not a number") from None
        if not opts.then_timeout > 0:
            raise UsageError("--then-timeout must be > 0")


# ------------------------------------------------------------------ input


def read_input(stdin: BinaryIO) -> bytes:
    """All of stdin, up to MAX_STDIN bytes (nothing when it is a terminal)."""
    try:
        if stdin.isatty():
            return b""
        return stdin.read(MAX_STDIN)
    except (OSError, ValueError):
        return b""


def parse_payload(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The payload object, or (None, failure reason)."""
    if not data.strip():
        return None, "empty"
    if len(data) > MAX_PAYLOAD:
        return None, "too_large"
    try:
        obj = jsonlite.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None, "not_json"
    if not isinstance(obj, dict):
        return None, "not_object"
    return obj, None


# ----------------------------------------------------------------- output


def duration(seconds: float) -> str:
    """A compact countdown: ``42m``, ``2h30m``, ``3d4h``."""
    minutes = max(0, int(seconds // 60))
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


#: The windows whose length is known, for the pace marker.
_LENGTHS = {"five_hour": 5 * 3600.0, "seven_day": 7 * 86400.0}
#: No pace in a window's first 5 % (exporter.projections.plan.pace.MIN_SHARE; a test pins it).
PACE_MIN_SHARE = 0.05


def pace_marker(percent: float, resets: float, length: float, now: float) -> str:
    """`` ⚠ 100% by Thu 14:00`` when the window runs out before its reset, else nothing.

    The average pace since the window opened (pace.average of
    exporter.projections.plan.pace, in plain arithmetic: the status line imports
    nothing heavy); nothing in a window's first :data:`PACE_MIN_SHARE`.
    """
    elapsed = now - (resets - length)
    if not 0.0 < percent < 100.0 or elapsed < PACE_MIN_SHARE * length:
        return ""
    at = now + (100.0 - percent) * elapsed / percent
    if at >= resets:
        return ""
    shown = time.strftime("%H:%M" if length <= 86400 else "%a %H:%M", time.localtime(at))
    return f" ⚠ 100% by {shown}"


def _percent(value: float) -> str:
    """A percentage as Claude Code's own footer writes it (whole numbers)."""
    return f"{value:.0f}%"


def render(
    payload: Mapping[str, Any] | None, today_usd: float | None, now: float, *, warn: str = ""
) -> str:
    """The line: model · context % · 5h % and time to reset · 7d % · session's and today's cost."""
    parts: list[str] = []
    rec = spool.sample_record(payload, now) if payload is not None else {}
    model = payload.get("model") if payload is not None else None
    name = spool.text(model.get("display_name")) if isinstance(model, dict) else None
    parts.append(name or rec.get("model") or FALLBACK)
    context = rec.get("context")
    if context and context[0] is not None:
        parts.append(f"ctx {_percent(context[0])}")
    windows = rec.get("windows", {})
    for key, label in (("five_hour", "5h"), ("seven_day", "7d")):
        if key not in windows:
            continue
        pct, resets = windows[key]
        if resets is not None and resets <= now:
            parts.append(f"{label} reset")
            continue
        marker = "" if resets is None else pace_marker(pct, resets, _LENGTHS[key], now)
        if resets is not None and key == "five_hour":
            parts.append(f"{label} {_percent(pct)} ↻{duration(resets - now)}{marker}")
        else:
            parts.append(f"{label} {_percent(pct)}{marker}")
    if "cost" in rec:
        parts.append(f"session ${rec['cost']:,.2f}")
    if today_usd is not None:
        parts.append(f"today ${today_usd:,.2f}")
    if warn:
        parts.append(warn)
    return SEPARATOR.join(parts)


# ------------------------------------------------------------------ --then


def start_then(command: str, environ: Mapping[str, str]) -> Any:
    """Start the user's status-line command in its own process group (stdin piped)."""
    import subprocess  # only with --then: too slow to import every refresh

    return subprocess.Popen(
        ["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env=dict(environ), start_new_session=True,
    )


def finish_then(proc: Any, data: bytes, timeout: float) -> tuple[bytes, str | None]:
    """Feed ``data`` to the command and collect its stdout: (output, failure reason)."""
    import contextlib
    import signal
    import subprocess

    try:
        out, _ = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):  # the whole group: a pipeline's children too
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            out = b""
        return out, "then_timeout"
    if proc.returncode != 0 or not out.strip():
        return out, "then_failed"
    return out, None


# ------------------------------------------------------------------- main


def main(
    argv: Sequence[str],
    stdin: BinaryIO,
    stdout: BinaryIO,
    environ: Mapping[str, str],
    *,
    clock: Callable[[], float] = time.time,
    program: str | None = None,
) -> int:
    """Run the status-line command; always prints one line and returns 0.

    With ``--install`` / ``--uninstall`` it edits Claude Code's settings instead
    (a person at a terminal: errors on stderr, exit 2 or 1); ``program`` is the
    console script this process was started as, the command the entry names.
    """
    if any(arg in SWITCHES for arg in argv):
        return _settings(argv, program, environ, stdout, clock)
    now = clock()
    try:
        line = _run(argv, stdin, stdout, environ, now)
    except Exception:  # never break the status line; count it if we can
        _record(environ, None, [spool.failure_record("internal", now)])
        line = FALLBACK
    if line is not None:
        _write(stdout, one_line(line).encode("utf-8", "replace") + b"\n")
    return 0


def _settings(argv: Sequence[str], program: str | None, environ: Mapping[str, str],
              stdout: BinaryIO, clock: Callable[[], float]) -> int:
    """``--install`` / ``--uninstall`` (docs/plan-limits.md): Claude Code's settings edited."""
    import io

    from exporter.cli import statusline_install  # json, shlex: never on a refresh

    try:
        opts = parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(f"claude-code-exporter statusline: {exc} (see --help)\n")
        return 2
    flags = {"uninstall": opts.uninstall, "dry_run": opts.dry_run, "args": opts.kept,
             "samples_dir": where(opts, environ)[0]}
    out = io.StringIO()
    rc = statusline_install.run(flags, program, environ, out, sys.stderr, clock=clock)
    _write(stdout, out.getvalue().encode())
    return rc


def one_line(text: str) -> str:
    """The line with control characters (newlines, escapes from the payload) made spaces."""
    return "".join(c if c.isprintable() else " " for c in text)


def _run(
    argv: Sequence[str], stdin: BinaryIO, stdout: BinaryIO, environ: Mapping[str, str],
    now: float,
) -> str | None:
    """The command's work; returns the line to print (None: already printed)."""
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        _record(environ, None, [spool.failure_record("usage", now)])
        return f"claude-code-exporter statusline: {exc} (see --help)"
    if opts.help:
        _write(stdout, USAGE.encode())
        return None
    data = read_input(stdin)
    proc, then_failure = None, None
    if opts.then:
        try:
            proc = start_then(opts.then, environ)
        except OSError:
            then_failure = "then_failed"
    payload, failure = parse_payload(data)
    if payload is not None:
        record = spool.sample_record(payload, now)
    else:
        record = spool.failure_record(failure or "internal", now)
    state_dir, shared = where(opts, environ)
    recorded = _record(environ, state_dir, [record], shared=shared)
    out = b""
    if proc is not None:
        out, then_failure = finish_then(proc, data, opts.then_timeout)
    if then_failure is not None:
        _record(environ, state_dir, [spool.failure_record(then_failure, now)], shared=shared)
    if out.strip():
        _write(stdout, out)
        return None
    return render(payload, today_cost(state_dir, record, now), now, warn=recorded)


def where(opts: _Options, environ: Mapping[str, str]) -> tuple[str, bool]:
    """The directory samples go to, and whether it is shared on purpose (spool dir set).

    ``--spool-dir``, ``--state-dir``, ``$CLAUDE_CODE_EXPORTER_SPOOL_DIR``, then the
    state dir's default: the first given wins.
    """
    if opts.spool_dir:
        return opts.spool_dir, True
    if opts.state_dir:
        return opts.state_dir, False
    explicit = spool.explicit_spool_dir(environ)
    if explicit is not None:
        return explicit, True
    return spool.default_state_dir(environ), False


def today_cost(state_dir: str, record: Mapping[str, Any], now: float) -> float | None:
    """Today's cost: the larger of the status line's own book and the exporter's figure.

    Both only grow through a day and both miss something: the book sees only the
    sessions whose status line ran, serve's figure only what it has ingested (and
    nothing while it is stopped). None when neither is known.
    """
    own = _booked(state_dir, record, now)
    published = spool.read_today(state_dir, now)
    known = [v for v in (own, published) if v is not None]
    return max(known) if known else None


def _booked(state_dir: str, record: Mapping[str, Any], now: float) -> float | None:
    """The status line's own today (booking this refresh's figure), or None."""
    if "session" not in record or "cost" not in record:
        return None
    try:
        return statusline_costs.record(state_dir, record["session"], record["cost"], now)
    except OSError:  # an unwritable book: the exporter's figure, if any
        return None


def _record(
    environ: Mapping[str, str], state_dir: str | None, records: list[dict[str, Any]],
    *, shared: bool = False,
) -> str:
    """Append to the spool; return "" or the warning the line shows when impossible."""
    try:
        if state_dir is None:
            state_dir, shared = where(_Options(), environ)
        spool.append(state_dir, records, shared=shared)
    except spool.SpoolFullError:
        return "⚠ not recorded: spool full, is the exporter running?"
    except (OSError, ValueError):
        return "⚠ not recorded"
    return ""


def _write(stdout: BinaryIO, data: bytes) -> None:
    """Write and flush, ignoring a closed pipe (Claude Code stopped listening)."""
    try:
        stdout.write(data)
        stdout.flush()
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # python -m exporter.cli.statusline (docs/plan-limits.md)
    raise SystemExit(main(sys.argv[1:], sys.stdin.buffer, sys.stdout.buffer, os.environ))
