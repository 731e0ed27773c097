"""The command line as a user meets it: exit codes, messages, report output."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.cli import main
from tests.conftest import assistant, jsonl


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a separate process."""
    return subprocess.run([sys.executable, "-m", "exporter.cli", *args], capture_output=True,
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
    proc = run("report", "--data-dir", str(real_tree), "--state-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    for figure in ("529 in 3 sessions", "3,084", "117.3k", "43.96M", "$28.51"):
        assert figure in proc.stdout, figure


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
