"""The status-line command as Claude Code runs it: a process, JSON on stdin, one line out.

Whatever the input or the state directory, it prints a line and exits 0;
samples land in the spool (and, through exporter.ledger.plan_store, in the ledger)
exactly once; ``--then`` passes stdin through to the user's own command.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import statusline
from exporter.cli.config import load_settings
from exporter.ingest import spool
from exporter.ledger.plan_store import ingest_samples
from exporter.ledger.store import Ledger
from exporter.sqlite import sqlite3
from tests.support.paths import ROOT
from tests.support.statusline import line_of, payload, run

NOW = 1_790_000_000.0


def spooled(state: Path) -> list[dict[str, Any]]:
    """The records in the spool."""
    path = state / spool.SPOOL_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines()]


# ----------------------------------------------------------- good payloads


def test_full_payload_prints_every_segment_and_records_a_sample(tmp_path: Path) -> None:
    """A subscriber's payload: model · ctx · 5h with countdown · 7d, and one sample spooled."""
    doc = payload()
    line = line_of(run(json.dumps(doc).encode(), state=tmp_path))
    parts = line.split(" · ")
    assert parts[0] == "Opus 4.6"
    assert parts[1] == "ctx 42%"
    assert parts[2].startswith("5h 35% ↻2h")
    assert parts[3] == "7d 17%"
    (rec,) = spooled(tmp_path)
    assert rec["session"] == doc["session_id"]
    assert rec["model"] == "claude-opus-4-6"
    assert rec["version"] == "2.1.90"
    assert rec["windows"] == {
        "five_hour": [35.0, doc["rate_limits"]["five_hour"]["resets_at"]],
        "seven_day": [17.0, doc["rate_limits"]["seven_day"]["resets_at"]],
    }
    assert rec["context"] == [42.0, 200000]
    assert rec["cost"] == 1.2345
    # Nothing of the payload beyond the figures: no paths, no working directory.
    assert "/home/dev" not in json.dumps(rec)
    assert (tmp_path / spool.SPOOL_NAME).stat().st_mode & 0o777 == 0o600


def test_payload_without_rate_limits_still_records_the_session(tmp_path: Path) -> None:
    """API-key users and fresh sessions have no rate_limits: no 5h/7d, a sample all the same."""
    line = line_of(run(json.dumps(payload(five=None, seven=None)).encode(), state=tmp_path))
    assert line == "Opus 4.6 · ctx 42% · session $1.23 · today $1.23"
    (rec,) = spooled(tmp_path)
    assert "windows" not in rec and rec["model"] == "claude-opus-4-6"


def test_only_the_five_hour_window_and_null_context(tmp_path: Path) -> None:
    """Each window may be absent independently; a null context percentage shows no ctx."""
    line = line_of(run(json.dumps(payload(seven=None, context=None)).encode(), state=tmp_path))
    assert line.startswith("Opus 4.6 · 5h 35% ↻")
    assert "7d" not in line and "ctx" not in line
    (rec,) = spooled(tmp_path)
    assert set(rec["windows"]) == {"five_hour"}
    assert rec["context"] == [None, 200000]


def test_passed_reset_shows_reset_and_today_cost_from_the_exporter(tmp_path: Path) -> None:
    """A window past its reset shows "reset"; today's cost comes from the published file."""
    now = time.time()
    spool.write_today(str(tmp_path), spool.local_midnight(now), 12.3456, now)
    doc = payload()
    doc["rate_limits"]["five_hour"]["resets_at"] = int(now) - 60
    line = line_of(run(json.dumps(doc).encode(), state=tmp_path))
    assert " · 5h reset · " in line
    assert line.endswith(" · today $12.35")


def test_yesterdays_cost_file_is_not_shown(tmp_path: Path) -> None:
    """A cost published for another day is not today's cost (the status line's own book is)."""
    now = time.time()
    spool.write_today(str(tmp_path), spool.local_midnight(now - 86_400 * 2), 99.0, now)
    line = line_of(run(json.dumps(payload()).encode(), state=tmp_path))
    assert line.endswith(" · today $1.23")


# ------------------------------------------------------------ bad payloads

BAD_INPUTS = {
    "empty": (b"", "empty"),
    "whitespace": (b"  \n\t ", "empty"),
    "not json": (b"hello, status line", "not_json"),
    "truncated": (json.dumps(payload(now=NOW)).encode()[:150], "not_json"),
    "json array": (b"[1, 2, 3]", "not_object"),
    "json string": (b'"Opus"', "not_object"),
    "invalid utf-8": (b'{"model": "\xff\xfe"}', "not_json"),
    "nested 100k deep": (b"[" * 100_000 + b"]" * 100_000, "not_json"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_prints_a_line_exits_0_and_counts(name: str, tmp_path: Path) -> None:
    """Malformed, truncated or empty input: a line, exit 0, one failure record with the reason."""
    data, reason = BAD_INPUTS[name]
    line = line_of(run(data, state=tmp_path))
    assert line == statusline.FALLBACK
    (rec,) = spooled(tmp_path)
    assert rec == {"v": 1, "t": rec["t"], "failure": reason}


def test_control_characters_from_the_payload_cannot_break_the_line(tmp_path: Path) -> None:
    """A model name with a newline or a terminal escape still gives exactly one plain line."""
    doc = payload(five=None, seven=None)
    doc["model"]["display_name"] = "Opus\n4.6\x1b[2J"
    assert line_of(run(json.dumps(doc).encode(), state=tmp_path)) == (
        "Opus 4.6 [2J · ctx 42% · session $1.23 · today $1.23")


def test_wrong_types_everywhere_record_what_is_valid(tmp_path: Path) -> None:
    """Fields of the wrong type, NaN, negative or absurd numbers are dropped, not trusted."""
    doc = {
        "session_id": 12, "model": ["x"], "version": None,
        "rate_limits": {"five_hour": {"used_percentage": "35", "resets_at": 1},
                        "seven_day": {"used_percentage": float("nan")},
                        "Bad Name": {"used_percentage": 5},
                        "seven_day_opus": {"used_percentage": 1e9},
                        "seven_day_sonnet": {"used_percentage": 12.5, "resets_at": "soon"}},
        "context_window": {"used_percentage": -3, "context_window_size": True},
        "cost": {"total_cost_usd": -1},
    }
    line = line_of(run(json.dumps(doc).encode(), state=tmp_path))
    assert line == statusline.FALLBACK
    (rec,) = spooled(tmp_path)
    assert rec == {"v": 1, "t": rec["t"], "windows": {"seven_day_sonnet": [12.5, None]}}


def test_huge_payload_is_handled(tmp_path: Path) -> None:
    """A 3 MB payload (a giant field) is parsed and recorded; a 5 MB one is refused cleanly."""
    doc = payload()
    doc["output_style"] = {"name": "x" * 3_000_000}
    big = json.dumps(doc).encode()
    assert line_of(run(big, state=tmp_path)).startswith("Opus 4.6 · ctx 42% · 5h 35%")
    doc["output_style"] = {"name": "x" * 5_000_000}
    assert line_of(run(json.dumps(doc).encode(), state=tmp_path)) == statusline.FALLBACK
    sample, failure = spooled(tmp_path)
    assert "windows" in sample
    assert failure["failure"] == "too_large"
    assert max(len(x) for x in (tmp_path / spool.SPOOL_NAME).read_bytes().splitlines()) < 1000


def test_more_than_the_stdin_limit_still_prints_a_line(tmp_path: Path) -> None:
    """Beyond 16 MiB the command stops reading, prints its line and exits 0."""
    data = b'{"a": "' + b"x" * (statusline.MAX_STDIN + 1000) + b'"}'
    assert line_of(run(data, state=tmp_path)) == statusline.FALLBACK
    assert spooled(tmp_path)[0]["failure"] == "too_large"


def test_bad_flag_is_shown_in_the_status_line(tmp_path: Path) -> None:
    """A typo in settings.json shows where the user looks (exit 0: a failure blanks the line)."""
    line = line_of(run(b"{}", "--thn", "x", state=tmp_path))
    assert "unknown option '--thn'" in line
    assert spooled(tmp_path)[0]["failure"] == "usage"


def test_help_exits_0() -> None:
    """--help prints the usage, naming --install and the settings file it writes."""
    proc = run(b"", "--help", state=None)
    assert proc.returncode == 0
    assert b"--install" in proc.stdout and b"~/.claude/settings.json" in proc.stdout


# ----------------------------------------------------------- state dir


def test_missing_state_dir_is_created_owner_only(tmp_path: Path) -> None:
    """A state directory that does not exist yet is created (mode 0700) and the sample lands."""
    state = tmp_path / "a" / "b"
    line_of(run(json.dumps(payload()).encode(), state=state))
    assert state.stat().st_mode & 0o777 == 0o700
    assert len(spooled(state)) == 1


def test_unusable_state_dir_still_prints_the_line(tmp_path: Path) -> None:
    """A state 'directory' below a regular file: the line still prints, marked, exit 0."""
    (tmp_path / "file").write_text("")
    line = line_of(run(json.dumps(payload()).encode(), state=tmp_path / "file" / "state"))
    assert line.startswith("Opus 4.6 · ctx 42%")
    assert line.endswith("⚠ not recorded")


def test_full_disk_still_prints_the_line(tmp_path: Path) -> None:
    """A spool on a full disk (/dev/full: every write fails with ENOSPC)."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    (tmp_path / spool.SPOOL_NAME).symlink_to("/dev/full")
    line = line_of(run(json.dumps(payload()).encode(), state=tmp_path))
    assert line.endswith("⚠ not recorded")


def test_spool_nobody_ingests_stops_growing(tmp_path: Path) -> None:
    """No exporter running for months: the spool stays at its cap and the line says why."""
    path = tmp_path / spool.SPOOL_NAME
    with path.open("wb") as fh:
        fh.truncate(spool.MAX_SPOOL_BYTES - 10)  # sparse: no real disk use
    line = line_of(run(json.dumps(payload()).encode(), state=tmp_path))
    assert line.endswith("⚠ not recorded: spool full, is the exporter running?")
    assert path.stat().st_size == spool.MAX_SPOOL_BYTES - 10


def test_locked_ledger_does_not_block_the_status_line(tmp_path: Path) -> None:
    """A ledger exclusively locked by another process: the command neither waits nor fails."""
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.close()
    holder = sqlite3.connect(tmp_path / "ledger.sqlite3", isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        line_of(run(json.dumps(payload()).encode(), state=tmp_path, timeout=10))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(spooled(tmp_path)) == 1


@pytest.mark.parametrize(
    "env",
    [
        {"XDG_STATE_HOME": "/x/state", "HOME": "/home/u"},
        {"XDG_STATE_HOME": "", "HOME": "/home/u"},
        {"XDG_STATE_HOME": "  ", "HOME": "/home/v"},
    ],
)
def test_default_state_dir_matches_the_exporter(env: dict[str, str]) -> None:
    """Without the override the command writes where the exporter's settings look."""
    assert Path(spool.default_state_dir(env)) == load_settings({}, env).state_dir
    assert spool.default_state_dir({**env, spool.STATE_DIR_ENV: "/elsewhere"}) == "/elsewhere"


# ------------------------------------------------------------------ --then


def test_then_passes_stdin_through_and_prints_its_output_instead(tmp_path: Path) -> None:
    """--then: the user's command gets the exact stdin bytes and its output replaces ours."""
    data = json.dumps(payload()).encode()
    script = "import hashlib,sys;print('mine', hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
    cmd = f'{sys.executable} -c "{script}"'
    proc = run(data, "--then", cmd, state=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.decode() == f"mine {hashlib.sha256(data).hexdigest()}\n"
    assert len(spooled(tmp_path)) == 1  # the sample is recorded all the same


def test_then_multiline_output_is_passed_verbatim(tmp_path: Path) -> None:
    """A multi-line status line from the wrapped command is printed as it was."""
    proc = run(json.dumps(payload()).encode(), "--then=printf 'one\\ntwo\\n'", state=tmp_path)
    assert proc.returncode == 0 and proc.stdout == b"one\ntwo\n"


def test_then_failure_falls_back_to_our_line_and_counts(tmp_path: Path) -> None:
    """A wrapped command that fails silently: our own line, exit 0, counted as then_failed."""
    line = line_of(run(json.dumps(payload()).encode(), "--then", "exit 3", state=tmp_path))
    assert line.startswith("Opus 4.6 · ctx 42%")
    sample, failure = spooled(tmp_path)
    assert "windows" in sample and failure["failure"] == "then_failed"


def test_then_hanging_command_is_killed_with_its_children(tmp_path: Path) -> None:
    """A command that prints and then hangs (with a background child) is cut off at the timeout."""
    start = time.monotonic()
    proc = run(json.dumps(payload()).encode(), "--then", "echo partial; sleep 30 & sleep 30",
               "--then-timeout", "0.5", state=tmp_path, timeout=20)
    assert time.monotonic() - start < 15
    assert proc.returncode == 0 and proc.stdout == b"partial\n"
    assert spooled(tmp_path)[-1]["failure"] == "then_timeout"


def test_then_with_bad_input_still_passes_it_through(tmp_path: Path) -> None:
    """Even input we cannot read goes to the wrapped command unchanged."""
    proc = run(b"not json at all", "--then", "cat", state=tmp_path)
    assert proc.returncode == 0 and proc.stdout == b"not json at all"


# -------------------------------------------------------------- into the ledger


def test_samples_land_in_the_ledger_exactly_once(tmp_path: Path) -> None:
    """Three refreshes (one repeated verbatim) and a bad one → 2 samples, 1 failure, once each."""
    first = json.dumps(payload(five=35.0, now=NOW)).encode()
    second = json.dumps(payload(five=36.0, now=NOW)).encode()
    for data in (first, second, first, b"{oops"):
        line_of(run(data, state=tmp_path))
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    conn = ledger._db
    got = ingest_samples(conn)
    assert (got.new, got.repeated, got.failures) == (2, 1, {"not_json": 1})
    again = ingest_samples(conn)
    assert (again.new, again.repeated, again.bytes_read) == (0, 0, 0)
    rows = conn.execute("SELECT first_seen, last_seen FROM plan_samples ORDER BY first_seen")
    (a_first, a_last), (b_first, b_last) = rows.fetchall()
    assert a_first < b_first < a_last  # the repeated payload: seen first and last
    assert b_first == b_last
    failures = conn.execute(
        "SELECT value FROM plan_counters WHERE name = 'statusline_failures' AND label = 'not_json'"
    ).fetchone()
    assert failures == (1,)
    ledger.close()


def test_in_process_main_is_what_the_cli_calls(tmp_path: Path) -> None:
    """main(argv, stdin, stdout, environ) with an injected clock: the CLI's seam."""
    out = io.BytesIO()
    env = {spool.STATE_DIR_ENV: str(tmp_path)}
    rc = statusline.main([], io.BytesIO(json.dumps(payload(now=NOW)).encode()), out, env,
                         clock=lambda: NOW)
    assert rc == 0
    assert out.getvalue().decode() == (
        "Opus 4.6 · ctx 42% · 5h 35% ↻2h30m · 7d 17% · session $1.23 · today $1.23\n")
    assert spooled(tmp_path)[0]["t"] == NOW


# ------------------------------------------------------------ import weight

HEAVY = ("opentelemetry", "pydantic", "rich", "msgspec", "structlog", "prometheus_client",
         "argparse", "sqlite3", "pysqlite3", "subprocess", "importlib.metadata", "typing",
         "pathlib", "dataclasses", "re", "json", "enum", "collections", "exporter.cli.config",
         "exporter.cli.commands", "exporter.ledger.store", "exporter.projections")


def test_statusline_imports_nothing_heavy(tmp_path: Path) -> None:
    """Python's -X importtime shows none of the slow modules on a refresh (console-script path).

    ``-S`` leaves out site-packages' start-up hooks, which are this machine's, not ours.
    """
    script = "import sys; from exporter.cli.entry import main; sys.exit(main(['statusline']))"
    environ = {**os.environ, "PYTHONPATH": str(ROOT), spool.STATE_DIR_ENV: str(tmp_path)}
    proc = subprocess.run([sys.executable, "-S", "-X", "importtime", "-c", script],
                          input=json.dumps(payload()).encode(), capture_output=True, env=environ,
                          timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().startswith("Opus 4.6 · ctx 42%")
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.decode().splitlines()
                if line.startswith("import time:")}
    assert {"exporter.cli.entry", "exporter.cli.statusline", "exporter.ingest.spool"} <= imported
    heavy = {m for m in imported if any(m == h or m.startswith(h + ".") for h in HEAVY)}
    assert heavy == set()


# ------------------------------------------------------------ pace marker

def test_the_pace_marker_shows_only_when_a_window_runs_out_before_its_reset() -> None:
    """`7d 62% ⚠ 100% by …` at the average pace (as pace.project has it); else no marker."""
    from exporter.projections.plan import pace

    now = 1_790_000_000.0
    doc = payload(five=35.0, seven=62.0, now=now)  # weekly resets in 300,000 s: 3.5 days in
    line = statusline.render(doc, None, now)
    resets = int(now) + 300_000
    start = resets - 7 * 86_400
    expected = pace.project(pace.PaceInput(now, start, resets, 62.0, ((62.0, start),)),
                            pace.average)
    assert expected.state == pace.LIMIT_AHEAD and expected.limit_at is not None
    when = time.strftime("%a %H:%M", time.localtime(expected.limit_at))
    assert f"7d 62% ⚠ 100% by {when}" in line
    assert "5h 35% ↻2h30m ·" in line  # 35 % after 2.5 h of 5: on track, no marker
    on_track = statusline.render(payload(five=35.0, seven=17.0, now=now), None, now)
    assert "⚠" not in on_track
    early = payload(five=30.0, seven=None, now=now)
    early["rate_limits"]["five_hour"]["resets_at"] = int(now) + 5 * 3600 - 300  # 5 min in
    assert "⚠" not in statusline.render(early, None, now)
    assert statusline.PACE_MIN_SHARE == pace.MIN_SHARE
