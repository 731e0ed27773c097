"""The command line as a user meets it: exit codes, messages, report output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.cli.commands import build_parser, main
from exporter.sqlite import sqlite3
from tests.support.records import assistant, jsonl


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a separate process."""
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_bad_configuration_exits_2_naming_each_setting(tmp_path: Path) -> None:
    """Two bad settings give exit 2 and one message naming both."""
    proc = run("serve", "--listen", "127.0.0.1:9464", "--workers", "0",
               "--state-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "--listen" in proc.stderr and "--workers" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_foreign_ledger_exits_3_and_is_untouched(tmp_path: Path) -> None:
    """A state dir holding someone else's SQLite file is refused, not reset."""
    ledger = tmp_path / "ledger.sqlite3"
    con = sqlite3.connect(ledger)
    con.execute("CREATE TABLE mine (x)")
    con.commit()
    con.close()
    before = ledger.read_bytes()
    (tmp_path / "empty").mkdir()
    proc = run("report", "--state-dir", str(tmp_path), "--data-dir", str(tmp_path / "empty"))
    assert proc.returncode == 3 and "another program" in proc.stderr
    assert ledger.read_bytes() == before


def test_report_text_on_real_transcripts(real_tree: Path, tmp_path: Path) -> None:
    """The terminal report shows the real fixture's totals."""
    proc = run("report", "--full", "--data-dir", str(real_tree), "--state-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    for figure in ("529 in 3 sessions", "3,084", "117.3k", "43.96M", "$28.51"):
        assert figure in proc.stdout, figure


def test_an_empty_range_says_so_instead_of_tables_of_zeros(real_tree: Path,
                                                            tmp_path: Path) -> None:
    """A summary over a range with no request prints one sentence, not zero-filled tables."""
    proc = run("report", "--data-dir", str(real_tree), "--state-dir", str(tmp_path),
               "--since", "2099-01-01")
    assert proc.returncode == 0, proc.stderr
    assert "No requests in this range." in proc.stdout
    assert "By model" not in proc.stdout and "gap p50" not in proc.stdout


def test_since_and_until_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--since/--until keep [since, until); a date-only --until includes that whole day."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    (proj / "s.jsonl").write_bytes(jsonl(
        assistant("a", ts="2026-01-01T10:00:00Z"), assistant("b", ts="2026-01-02T10:00:00Z"),
        assistant("c", ts="2026-01-03T10:00:00Z")))
    args = ["report", "--json", "--data-dir", str(tmp_path), "--state-dir", str(tmp_path / "s"),
            "--timezone", "UTC"]

    def requests(*extra: str) -> int:
        assert main([*args, *extra]) == 0
        return int(json.loads(capsys.readouterr().out)["totals"]["requests"])

    assert requests("--since", "2026-01-02", "--until", "2026-01-02") == 1
    assert requests("--since", "20260102", "--until", "2026-01-03T10:00:00") == 1
    assert requests("--since", "2026-01-02T10:00:00") == 2
    assert requests("--until", "2026-01-02T10:00:00Z") == 1


def test_an_age_past_the_calendar_is_a_usage_error(tmp_path: Path) -> None:
    """``--since 99999999w`` (before the year 1) is refused naming the flag: no internal error."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    (proj / "s.jsonl").write_bytes(jsonl(assistant()))
    proc = run("report", "--since", "99999999w", "--data-dir", str(tmp_path),
               "--state-dir", str(tmp_path / "s"))
    assert proc.returncode == 2, proc.stderr
    assert "--since '99999999w' is out of range" in proc.stderr


def test_bad_since_is_a_usage_error() -> None:
    """An unparseable --since is refused by the argument parser (exit 2)."""
    proc = run("report", "--since", "last tuesday")
    assert proc.returncode == 2 and "--since" in proc.stderr


def test_generate_then_report_matches_truth(tmp_path: Path) -> None:
    """`generate` writes a tree whose `report --json` totals equal truth.json."""
    assert run("generate", str(tmp_path / "t"), "--seed", "3", "--sessions", "3").returncode == 0
    proc = run("report", "--json", "--data-dir", str(tmp_path / "t"), "--state-dir",
               str(tmp_path / "s"))
    truth = json.loads((tmp_path / "t" / "truth.json").read_text())
    assert json.loads(proc.stdout)["totals"]["requests"] == truth["totals"]["requests"]


def test_busy_port_and_missing_certificate_exit_2(tmp_path: Path) -> None:
    """A port already taken, or a certificate that cannot be read, is a clear exit 2."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run("serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "d"),
                   "--state-dir", str(tmp_path / "s1"))
    assert proc.returncode == 2 and "listen" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
               "--state-dir", str(tmp_path / "s2"), "--tls-cert-file", str(tmp_path / "no.pem"),
               "--tls-key-file", str(tmp_path / "no.key"))
    assert proc.returncode == 2 and "tls_cert_file" in proc.stderr, proc.stderr


def clean_env(home: Path) -> dict[str, str]:
    """The environment of a user whose home is ``home`` and who set nothing of ours."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLAUDE_") and k not in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")}
    return {**env, "HOME": str(home)}


FIRST_RUN = ("No Claude Code transcripts or Codex sessions found in ~/.claude/projects, "
             "~/.config/claude/projects, ~/.codex. Use Claude Code first, point --data-dir at a "
             "directory of transcripts (--codex-home at a Codex home), or try "
             "`claude-code-exporter serve --demo`.\n")


def test_first_run_says_so_in_one_line(tmp_path: Path) -> None:
    """No transcripts anywhere: one line on stdout saying what to do, nothing on stderr, exit 0."""
    proc = run("report", env=clean_env(tmp_path))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, FIRST_RUN, "")
    as_json = run("report", "--json", env=clean_env(tmp_path))
    assert as_json.returncode == 0 and as_json.stderr == FIRST_RUN
    assert json.loads(as_json.stdout)["totals"]["requests"] == 0


def test_absent_default_root_is_no_warning(tmp_path: Path) -> None:
    """With only ~/.claude present, a report logs nothing about ~/.config/claude."""
    proj = tmp_path / ".claude" / "projects" / "-p"
    proj.mkdir(parents=True)
    (proj / "s.jsonl").write_bytes(jsonl(assistant("a")))
    proc = run("report", "--json", env=clean_env(tmp_path))
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout)["totals"]["requests"] == 1


def test_missing_data_dir_is_exit_2_naming_it(tmp_path: Path) -> None:
    """A --data-dir that does not exist is a usage error naming the path."""
    proc = run("report", "--data-dir", str(tmp_path / "nope"), "--state-dir", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr == f"claude-code-exporter report: error: --data-dir {tmp_path / 'nope'} " \
                          "does not exist\n"


@pytest.mark.parametrize(("args", "message"), [
    (("report", "--sinse", "7d"), "claude-code-exporter report: error: unrecognized arguments: "
                                  "--sinse; did you mean --since?"),
    (("report", "dayly"), "claude-code-exporter report: error: argument view: invalid choice: "
                          "'dayly' (choose from 'summary', 'daily', 'weekly', 'monthly', "
                          "'session', 'project', 'blocks', 'skill', 'plugin', 'mcp', 'agent', "
                          "'limits'); did you mean 'daily'?"),
    (("serve", "--lisen", "127.0.0.1:1"), "claude-code-exporter serve: error: unrecognized "
                                          "arguments: --lisen 127.0.0.1:1; did you mean --listen?"),
    (("reprot",), "claude-code-exporter: error: argument command: invalid choice: 'reprot' "
                  "(choose from 'report', 'serve', 'backfill', 'rebuild', 'statusline', "
                  "'generate'); "
                  "did you mean 'report'?"),
])
def test_a_typo_gets_the_nearest_option(args: tuple[str, ...], message: str) -> None:
    """A mistyped option, view or command is exit 2 with the nearest valid one."""
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == message


@pytest.mark.parametrize("args", [("report", "--sinse", "7d"), ("serve", "--nope"),
                                  ("report", "dayly"), ("reprot",)])
def test_a_usage_error_is_two_lines_not_the_whole_usage(args: tuple[str, ...]) -> None:
    """An unknown flag, view or command: the error and where the options are, no usage dump."""
    proc = run(*args)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("claude-code-exporter") and ": error: " in lines[0]
    prog = lines[0].split(": error: ")[0]
    assert lines[1] == f"Try '{prog} --help' for the options."


def test_since_and_until_take_today_and_yesterday(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """``yesterday`` and ``today`` are dates in the report's zone: whole days, as 2026-01-31."""
    now = time.time()
    day = 86_400
    stamps = {"two-days-ago": now - 2 * day, "yesterday": now - day, "today": now}
    midnight = now // day * day  # UTC, the zone of the report below
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    (proj / "s.jsonl").write_bytes(jsonl(*(
        assistant(key, ts=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(
            min(ts, midnight - day + 60) if key == "yesterday" else ts)))
        for key, ts in stamps.items())))
    args = ["report", "--json", "--data-dir", str(tmp_path), "--state-dir", str(tmp_path / "s"),
            "--timezone", "UTC"]

    def requests(*extra: str) -> int:
        assert main([*args, *extra]) == 0
        return int(json.loads(capsys.readouterr().out)["totals"]["requests"])

    assert requests("--since", "yesterday", "--until", "yesterday") == 1
    assert requests("--since", "Yesterday") == 2
    assert requests("--since", "today") == 1
    assert requests("--until", "yesterday") == 2


def test_a_typo_in_the_config_file_names_the_file(tmp_path: Path) -> None:
    """A mistyped TOML key is a key of that file, with the nearest one; never a flag."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("lisen = '127.0.0.1:1'\n")
    proc = run("serve", "--config", str(cfg), "--state-dir", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr == (f"claude-code-exporter: invalid configuration:\n"
                           f"  {cfg}: unknown key 'lisen'; did you mean 'listen'?\n")


@pytest.mark.parametrize(("args", "message"), [
    (("--since", "2026-02-01", "--until", "2026-01-01", "--timezone", "UTC"),
     "--since 2026-02-01 (2026-02-01T00:00:00Z) is not before --until 2026-01-01 "
     "(2026-01-02T00:00:00Z)"),
    (("--timezone", "Europe/Berln"), "unknown time zone 'Europe/Berln'; did you mean "
                                     "Europe/Berlin?"),
    (("--csv",), "--csv needs a view: report daily|weekly|monthly|session|project|blocks|"
                 "skill|plugin|mcp|agent|limits --csv"),
    (("--breakdown",), "--breakdown needs a view: report daily|weekly|monthly|session|project|"
                       "blocks|skill|plugin|mcp|agent --breakdown"),
    (("limits", "--limit", "3"), "--limit does not apply to report limits (it lists every "
                                 "window instance in the range, by window and reset)"),
    (("daily", "--project", "nope"), "--project 'nope' matches nothing in the ledger "
                                     "(known: p)"),
])
def test_unusable_report_flags_are_exit_2(args: tuple[str, ...], message: str,
                                          tmp_path: Path) -> None:
    """An inverted range, an unknown zone, a view-only flag or an unknown project: exit 2."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    (proj / "s.jsonl").write_bytes(jsonl(assistant("a", cwd="/home/u/p")))
    proc = run("report", "--data-dir", str(tmp_path), "--state-dir", str(tmp_path / "s"), *args)
    assert proc.returncode == 2
    assert proc.stderr == f"claude-code-exporter report: error: {message}\n"


@pytest.mark.parametrize("command", ["report", "serve", "backfill"])
def test_help_shows_every_default_then_examples_and_exit_codes(command: str) -> None:
    """Every flag has help text with its default; the help ends with examples and exit codes."""
    parser = build_parser()
    sub = parser._commands[command]
    for action in sub._actions:
        if action.option_strings and action.dest != "help":
            assert action.help and "default" in action.help, action.option_strings
    text = run(command, "--help").stdout
    assert "\nexamples:\n" in text
    assert text.rstrip().splitlines()[-1].startswith("exit codes: 0 ")


def test_views_on_real_transcripts_add_up(real_tree: Path, tmp_path: Path) -> None:
    """Every view of the real fixture totals its README: 529 requests, $28.51."""
    base = ("report", "--json", "--data-dir", str(real_tree), "--state-dir", str(tmp_path))
    for view in ("daily", "weekly", "monthly", "session", "project", "blocks"):
        proc = run(*base, view)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        totals = got["totals"]
        assert (totals["requests"], totals["input_tokens"], totals["output_tokens"],
                totals["cache_read_tokens"], totals["cache_write_5m_tokens"],
                totals["cache_write_1h_tokens"]) == (529, 3_084, 117_289, 43_960_831, 937_099,
                                                     394_137), view
        assert round(totals["cost_usd"], 2) == 28.51
        assert sum(r["requests"] for r in got["rows"]) == 529


def test_the_progress_bar_never_shares_a_line_with_a_log_message(tmp_path: Path) -> None:
    """On a terminal, a warning logged mid-scan prints on a line of its own, above the bar."""
    import pty

    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    (proj / "s.jsonl").write_bytes(jsonl(*(assistant(f"m{i}", f"r{i}") for i in range(50))))
    (proj / "gone.jsonl").symlink_to(tmp_path / "missing")  # listed, then unreadable: a warning
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "report", "--data-dir", str(tmp_path),
         "--state-dir", str(tmp_path / "s"), "--log-format", "console"],
        stdout=follower, stderr=follower, env={**os.environ, "TERM": "xterm"})
    os.close(follower)
    chunks = []
    while True:  # until the child closes its end (bounded by its timeout below)
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    screen = b"".join(chunks).decode(errors="replace")
    lines = [line for part in screen.split("\n") for line in part.split("\r")]
    warned = [line for line in lines if "transcript_unreadable" in line]
    assert warned, screen
    assert all("reading transcripts" not in line for line in warned), screen
