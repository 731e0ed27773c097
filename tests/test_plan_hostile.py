"""Hostile status-line payloads and spools: rejected and counted, never a stopped daemon.

A lone surrogate in a payload's text, an implausible percentage or reset time, a
flood of window names: each is a counted rejection at ingest, and ``serve``,
``report`` and ``backfill`` keep running (docs/plan-limits.md, "Which samples
are kept"). A command's unexpected exception is never called configuration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import commands as cli
from exporter.errors import ConfigError
from exporter.ingest import plausible, spool
from exporter.ledger.plan_store import ingest_samples
from exporter.ledger.store import Ledger
from exporter.projections.plan import gauges as metrics
from exporter.projections.plan.windows import PlanFigures, plan_figures, plan_history
from tests.support.exposition import total
from tests.support.logs import Log
from tests.support.plan import payload, record
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.statusline import line_of, run
from tests.support.wait import poll

NOW = 1_790_000_000.0
HOUR = 3600
# Rows as an older build stored them (the status line's: the ``agent`` column's default).
PLAN_WINDOWS = ("INSERT INTO plan_windows (window, resets_at, max_pct, first_seen, last_seen, "
                "reported_resets_at) VALUES (?,?,?,?,?,?)")
PLAN_LEVELS = "INSERT INTO plan_levels (window, resets_at, pct, first_seen) VALUES (?,?,?,?)"
#: A lone surrogate where Claude Code puts text: valid JSON, not valid Unicode.
SURROGATE_PAYLOADS = (b'{"session_id":"\\ud800"}', b'{"version":"\\udfff","session_id":"s"}',
                      b'{"model":{"id":"claude-\\ud83d"},"session_id":"s"}')


def rejected(serve: Serve, reason: str) -> float:
    """``claude_code_exporter_plan_spool_rejected_lines_total{reason}`` of one scrape."""
    fam = serve.scrape()["claude_code_exporter_plan_spool_rejected_lines"]
    return float(sum(s.value for s in fam.samples if s.labels.get("reason") == reason))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``report``/``backfill`` as a separate process."""
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def transcripts(tmp_path: Path) -> Path:
    """A data dir with one transcript (backfill of an empty ledger is another matter)."""
    data = tmp_path / "claude"
    (data / "projects" / "-p").mkdir(parents=True)
    (data / "projects" / "-p" / "s.jsonl").write_bytes(jsonl(assistant("a")))
    return data


def start(data: Path, state: Path) -> Serve:
    """A serve that is either healthy or already gone (never a minute's wait for a corpse)."""
    serve = Serve(data, state, wait=False)
    poll(lambda: serve._healthy() or not serve.alive(), 60, "serve healthy or exited")
    assert serve.alive(), serve.log()
    return serve


def test_a_lone_surrogate_payload_is_a_counted_rejection_and_serve_stays_up(
    tmp_path: Path,
) -> None:
    """Surrogate payloads via a real status line: serve stays up, counts them; report works."""
    data, state = transcripts(tmp_path), tmp_path / "state"
    for stdin in SURROGATE_PAYLOADS:
        assert line_of(run(stdin, state=state))  # prints its line, exits 0
    assert line_of(run(json.dumps(payload(NOW, {})).encode(), state=state))  # one good sample
    serve = start(data, state)
    try:
        poll(lambda: rejected(serve, "bad_text") == 3, 15, "three bad_text rejections")
        assert total(serve.scrape(), "claude_code_plan_window_samples") == 1
        assert serve.alive() and serve.stop() == 0
    finally:
        if serve.proc.poll() is None:
            serve.kill9()
    common = ("--data-dir", str(data), "--state-dir", str(state))
    assert run_cli("report", "--json", *common).returncode == 0
    assert run_cli("report", "limits", *common).returncode == 0
    done = run_cli("backfill", "-o", str(tmp_path / "h.om"), *common)
    assert done.returncode == 0, done.stderr
    restarted = start(data, state)  # and again: the spool no longer matters
    assert rejected(restarted, "bad_text") == 3
    assert restarted.stop() == 0


def test_a_spool_written_by_an_older_version_with_a_surrogate_is_skipped_by_every_command(
    tmp_path: Path,
) -> None:
    """A spool already holding a surrogate sample: report, backfill, serve skip and count it."""
    data, state = transcripts(tmp_path), tmp_path / "state"
    state.mkdir(mode=0o700)
    bad = {"v": 1, "t": NOW, "session": "\ud800", "windows": {"five_hour": [30.0, NOW + HOUR]}}
    good = {"v": 1, "t": NOW + 1, "session": "s", "windows": {"five_hour": [31.0, NOW + HOUR]}}
    (state / spool.SPOOL_NAME).write_bytes(spool.encode(bad) + spool.encode(good))
    common = ("--data-dir", str(data), "--state-dir", str(state))
    report = run_cli("report", "limits", "--json", *common)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["windows"][0]["window"] == "five_hour"
    assert run_cli("backfill", "-o", str(tmp_path / "h.om"), *common).returncode == 0
    serve = start(data, state)
    try:
        assert rejected(serve, "bad_text") == 1
        assert total(serve.scrape(), "claude_code_plan_window_samples") == 1
    finally:
        serve.stop()


def test_a_surrogate_spool_line_is_rejected_in_process_and_the_rest_kept(tmp_path: Path) -> None:
    """In the ledger's own write path a surrogate in any text field is one bad_text rejection."""
    lines = [{"v": 1, "t": NOW + i, key: "x\udc80"} for i, key in
             enumerate(("session", "model", "version"))]
    lines.append({"v": 1, "t": NOW + 9, "session": "fine", "model": "m", "version": "2.1"})
    (tmp_path / spool.SPOOL_NAME).write_bytes(b"".join(spool.encode(r) for r in lines))
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        got = ingest_samples(ledger._db, tmp_path)
    finally:
        ledger.close()
    assert (got.new, got.rejected) == (1, {"bad_text": 3})


def test_a_number_too_large_for_a_float_is_a_rejection_not_a_stall(tmp_path: Path) -> None:
    """A 400-digit time is a counted rejection; the spool moves on and later samples arrive."""
    (tmp_path / spool.SPOOL_NAME).write_bytes(
        b'{"v":1,"t":1' + b"0" * 400 + b'}\n'
        + spool.encode({"v": 1, "t": NOW, "session": "fine", "model": "m", "version": "2.1"}))
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        got = ingest_samples(ledger._db, tmp_path)
    finally:
        ledger.close()
    assert got.new == 1 and sum(got.rejected.values()) == 1


@pytest.mark.parametrize(("exc", "code", "said"), [
    (ValueError("'utf-8' codec can't encode character '\\ud800'"), 70,
     "claude-code-exporter serve: internal error: ValueError: "),
    (RuntimeError("boom"), 70, "claude-code-exporter serve: internal error: "),
    (ConfigError("invalid configuration:\n  --listen: nowhere"), 2,
     "claude-code-exporter: invalid configuration:\n  --listen: nowhere"),
])
def test_only_configuration_is_exit_2(exc: Exception, code: int, said: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """An unexpected exception is exit 70, logged with its type; a ConfigError stays exit 2."""
    log = Log()
    assert cli._failed("serve", exc, log) == code
    err = capsys.readouterr().err
    assert err.startswith(said) and (code == 2) == ("invalid configuration" in err)
    if code == 70:  # cli.EXIT_INTERNAL
        assert log.named("command_failed")[0]["error"] == type(exc).__name__


# ------------------------------------------------------------------- item 13: plausibility


def ingest(state: Path, docs: list[tuple[float, dict[str, Any]]]) -> PlanFigures:
    """Record payloads through the real status line, ingest them, read the figures at NOW."""
    record(state, docs)
    ledger = Ledger(state / "ledger.db")
    try:
        while ingest_samples(ledger._db, state).more:
            pass
        return plan_figures(ledger._db, NOW + 60)
    finally:
        ledger.close()


def test_implausible_samples_are_rejected_by_reason_and_never_reach_the_gauges(
    tmp_path: Path,
) -> None:
    """A reset in the year 5107 or a 999.9 % figure is a counted rejection, not the gauge."""
    year_5107 = 99_000_000_000
    docs = [
        (NOW, payload(NOW, {"five_hour": (31.0, int(NOW) + 2 * HOUR)})),
        (NOW + 1, payload(NOW + 1, {"five_hour": (32.0, year_5107)})),
        (NOW + 2, payload(NOW + 2, {"five_hour": (999.9, int(NOW) + 2 * HOUR)})),
        (NOW + 3, payload(NOW + 3, {"five_hour": (33.0, int(NOW) + 2 * HOUR)})),
        (NOW + 4, payload(NOW + 4, {"seven_day": (5.0, int(NOW) + 8 * 86_400)})),
        (NOW + 5, payload(NOW + 5, {"five_hour": (33.0, int(NOW) + 6 * HOUR)})),
        (NOW + 6, payload(NOW + 6, {"five_hour": (30.0, int(NOW) - 40 * 86_400)})),  # kept
        (NOW + 7, payload(NOW + 7, {"seven_day": (5.0, int(NOW) + 6 * 86_400)}, context=150.0)),
        (NOW + 8, payload(NOW + 8, {"thirty_day": (5.0, int(NOW) + 29 * 86_400),
                                    "mystery": (5.0, int(NOW) + 30 * 86_400)})),
        (NOW + 9, payload(NOW + 9, {"hourly_thing": (5.0, int(NOW) + 40 * 86_400)})),
    ]
    fig = ingest(tmp_path, docs)
    assert sorted(fig.windows) == ["five_hour", "mystery", "thirty_day"]
    five = fig.windows["five_hour"]
    assert (five.used_ratio, five.resets_at) == (0.33, int(NOW) + 2 * HOUR)
    assert fig.rejected["implausible_reset"] == 4  # 5107, 6 h, 8 d, 40 d unstated
    assert fig.rejected["implausible_percent"] == 2  # 999.9 %, a context at 150 %
    assert fig.samples == 4


def test_window_lengths_come_from_the_name() -> None:
    """Known and stated lengths bound a reset; an unstated one gets the sane maximum."""
    assert plausible.stated_length("five_hour") == 5 * HOUR
    assert plausible.stated_length("seven_day_opus") == 7 * 86_400
    assert plausible.stated_length("30_days") == 30 * 86_400
    assert plausible.stated_length("99999_day") == plausible.MAX_STATED_S
    assert plausible.stated_length("mystery") is None
    assert plausible.reset_bound("mystery") == plausible.MAX_UNSTATED_S + plausible.RESET_SLACK_S


# ------------------------------------------------------------------- item 14: window names


def flood(count: int) -> list[tuple[float, dict[str, Any]]]:
    """``count`` payloads, each with the two known windows and 6 new names (8 windows)."""
    out = []
    for i in range(count):
        windows = {"five_hour": (10.0, int(NOW) + HOUR), "seven_day": (5.0, int(NOW) + 86_400)}
        windows.update({f"w{i}_{j}": (1.0, int(NOW) + HOUR) for j in range(6)})
        out.append((NOW + i, payload(NOW + i, windows)))
    return out


def test_a_flood_of_window_names_is_capped_and_counted(tmp_path: Path) -> None:
    """200 payloads of new window names: the known ones and 8 others pass, the rest counted."""
    fig = ingest(tmp_path, flood(200))
    others = [n for n in fig.windows if n not in plausible.KNOWN_WINDOWS]
    assert {"five_hour", "seven_day"} <= set(fig.windows)
    assert len(others) == plausible.MAX_OTHER_WINDOWS
    assert fig.rejected["window_cap"] == 199  # the first line fits; the rest were cut
    assert fig.samples == 200  # their known windows were kept
    for fam in metrics.PLAN_FAMILIES:
        if "window" in fam.labels:
            assert len({lab["window"] for _, lab in fam.observe(fig)}) <= 2 + 8, fam.name
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        history = plan_history(ledger.read)
    finally:
        ledger.close()
    assert len({w[1] for w in history.windows}) == 2 + plausible.MAX_OTHER_WINDOWS


def test_a_ledger_flooded_before_the_cap_shows_the_cap(tmp_path: Path) -> None:
    """Window rows stored by an older version are capped when read, known names first."""
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        ingest_samples(ledger._db, tmp_path)  # the plan tables
        rows = [(f"w{i}", int(NOW) + HOUR, 1.0, NOW + i, NOW + i, int(NOW) + HOUR)
                for i in range(1600)]
        rows.append(("five_hour", int(NOW) + HOUR, 40.0, NOW + 2000, NOW + 2000, int(NOW) + HOUR))
        with ledger._db:
            ledger._db.executemany(PLAN_WINDOWS, rows)
        fig = plan_figures(ledger._db, NOW)
    finally:
        ledger.close()
    assert sorted(fig.windows) == sorted(["five_hour", *(f"w{i}" for i in range(8))])


def test_a_ledger_poisoned_before_the_rules_does_not_pin_the_gauge(tmp_path: Path) -> None:
    """Rows an older version stored (a reset in 5107, a 999.9 % level) are passed over."""
    good = int(NOW) + 2 * HOUR
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        ingest_samples(ledger._db, tmp_path)  # the plan tables
        with ledger._db:
            ledger._db.executemany(PLAN_WINDOWS, [
                ("five_hour", good, 999.9, NOW, NOW + 3, good),
                ("five_hour", 99_000_000_000, 32.0, NOW + 1, NOW + 1, 99_000_000_000)])
            ledger._db.executemany(PLAN_LEVELS, [
                ("five_hour", good, 31.0, NOW), ("five_hour", good, 999.9, NOW + 2),
                ("five_hour", 99_000_000_000, 32.0, NOW + 1)])
        five = plan_figures(ledger._db, NOW + 60).windows["five_hour"]
    finally:
        ledger.close()
    assert (five.used_ratio, five.resets_at, five.exhausted) == (0.31, good, 0)


# ------------------------------------------------------------------- item 16: not a file


def make(kind: str, path: Path) -> None:
    """Put a FIFO, a directory, a link to /dev/zero or a huge sparse file at ``path``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        with path.open("wb") as fh:
            fh.truncate(8 << 30)  # 8 GiB, sparse


@pytest.mark.parametrize("name", [spool.SPOOL_NAME, spool.TODAY_NAME])
@pytest.mark.parametrize("kind", ["fifo", "directory", "dev_zero", "huge"])
def test_a_non_regular_file_never_hangs_the_status_line(tmp_path: Path, name: str,
                                                         kind: str) -> None:
    """A FIFO, directory, /dev/zero or huge file in the state dir: exit 0, its line, in time."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    make(kind, state / name)
    now = time.time()  # the status line runs now: a reset an hour ahead of the real clock
    doc = payload(now, {"five_hour": (35.0, int(now) + HOUR)})
    try:
        proc = run(json.dumps(doc).encode(), state=state, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the status line hung on a {kind} at {name}")
    line = line_of(proc)
    assert line.startswith("Opus 4.6 · ctx ") and "5h 35%" in line
    assert ("not recorded" in line) == (name == spool.SPOOL_NAME)  # (a huge one: "spool full")


def test_a_fifo_spool_never_hangs_the_ingest(tmp_path: Path) -> None:
    """A FIFO in the spool's place: report (which ingests the spool) finishes, exit 0."""
    data, state = tmp_path / "claude", tmp_path / "state"
    (data / "projects").mkdir(parents=True)
    state.mkdir(mode=0o700)
    make("fifo", state / spool.SPOOL_NAME)
    try:
        proc = subprocess.run([sys.executable, "-m", "exporter", "report", "--json",
                               "--data-dir", str(data), "--state-dir", str(state)],
                              capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("report hung on a FIFO spool")
    assert proc.returncode == 0, proc.stderr


def test_a_spool_linked_to_dev_zero_is_skipped_by_the_ingest(tmp_path: Path) -> None:
    """A spool that never ends (a link to /dev/zero) is not read: no endless backlog."""
    make("dev_zero", tmp_path / spool.SPOOL_NAME)
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        got = ingest_samples(ledger._db, tmp_path)
    finally:
        ledger.close()
    assert (got.more, got.bytes_read, got.rejected) == (False, 0, {})


def test_today_cost_is_read_from_a_regular_file_only(tmp_path: Path) -> None:
    """read_today of a FIFO or a directory is None at once; of a real file, the figure."""
    make("fifo", tmp_path / spool.TODAY_NAME)
    assert spool.read_today(str(tmp_path), NOW) is None
    (tmp_path / spool.TODAY_NAME).unlink()
    spool.write_today(str(tmp_path), spool.local_midnight(NOW), 1.5, NOW)
    assert spool.read_today(str(tmp_path), NOW) == 1.5
