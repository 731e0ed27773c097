"""`report` beside a `serve` that follows other transcripts answers exactly (issue 35, item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exporter.ledger.store import Ledger
from exporter.synth import GenOptions, generate
from tests.support.exposition import total
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.wait import poll


def cli(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the command line as a process with ``env`` added to the environment."""
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **env})


def assert_exact(got: dict[str, Any], truth: dict[str, Any]) -> None:
    """Every total, line count and rejection is the tree's (costs to 1e-5 USD)."""
    for key, value in truth["totals"].items():
        if key.endswith("_usd"):
            assert abs(got["totals"][key] - value) < 1e-5, key
        else:
            assert got["totals"][key] == value, key
    assert got["lines"] == truth["lines"]
    assert got["rejected_by_reason"] == truth["rejected_by_reason"]


def test_report_on_other_transcripts_beside_serve_gives_their_exact_figures(
    tmp_path: Path,
) -> None:
    """`report --data-dir B` (and CLAUDE_CONFIG_DIR=B) beside `serve --data-dir A`: B's figures.

    Serve's ledger never sees B, and the temporary ledger is gone after.
    """
    a = generate(tmp_path / "A", GenOptions(seed=21, sessions=2, requests_per_session=25))
    b = generate(tmp_path / "B", GenOptions(seed=22, sessions=3, requests_per_session=30))
    state, temp, home = tmp_path / "state", tmp_path / "tmp", tmp_path / "home"
    temp.mkdir()
    home.mkdir()
    env = {"TMPDIR": str(temp), "HOME": str(home)}
    serve = Serve(tmp_path / "A", state)
    try:
        want = a["totals"]["requests"]
        poll(lambda: total(serve.scrape(), "claude_code_requests") == want, 30, "A ingested")
        for how in (["--data-dir", str(tmp_path / "B")], []):
            extra = {} if how else {"CLAUDE_CONFIG_DIR": str(tmp_path / "B")}
            done = cli("report", "--json", *how, "--state-dir", str(state), env={**env, **extra})
            assert done.returncode == 0, done.stderr
            assert_exact(json.loads(done.stdout), b)
            assert f"serve (pid {serve.proc.pid}) does not follow" in done.stderr
            assert list(temp.iterdir()) == []  # the private ledger was removed
        text = cli("report", "monthly", "--data-dir", str(tmp_path / "B"),
                   "--state-dir", str(state), env={**env, "COLUMNS": "200"})
        assert text.returncode == 0 and "No requests" not in text.stdout, text.stdout
        mixed = cli("report", "--json", "--data-dir", str(tmp_path / "A"), "--data-dir",
                    str(tmp_path / "B"), "--state-dir", str(state), env=env)
        assert json.loads(mixed.stdout)["totals"]["requests"] == want + b["totals"]["requests"]
        assert total(serve.scrape(), "claude_code_requests") == want  # serve saw none of B
    finally:
        assert serve.stop() == 0
    ledger = Ledger(state / "ledger.sqlite3")
    try:
        roots = [r[0] for r in ledger.read("SELECT path FROM roots")]
        assert roots == [str(tmp_path / "A" / "projects")] and ledger.count() == want
    finally:
        ledger.close()


def test_report_on_followed_transcripts_beside_serve_reads_serves_ledger(
    tmp_path: Path,
) -> None:
    """`report --data-dir A` beside `serve --data-dir A` reads serve's ledger, no temporary one."""
    a = generate(tmp_path / "A", GenOptions(seed=23, sessions=2, requests_per_session=20))
    state, temp = tmp_path / "state", tmp_path / "tmp"
    temp.mkdir()
    serve = Serve(tmp_path / "A", state)
    try:
        want = a["totals"]["requests"]
        poll(lambda: total(serve.scrape(), "claude_code_requests") == want, 30, "A ingested")
        done = cli("report", "--json", "--data-dir", str(tmp_path / "A"), "--state-dir",
                   str(state), env={"TMPDIR": str(temp)})
        assert done.returncode == 0, done.stderr
        assert "reporting from its ledger" in done.stderr and "temporary" not in done.stderr
        assert_exact(json.loads(done.stdout), a)
    finally:
        assert serve.stop() == 0
