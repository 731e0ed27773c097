"""`report --json` against the generator's ground truth, across seeds, restarts and kills."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporter.cli.commands import main
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate
from tests.support.figures import assert_matches
from tests.support.ledgers import killed_mid_ingest, ledger_rows, next_kill_target
from tests.support.wait import poll


def report(tree: Path, state: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    """Run `report --json` in-process and parse its output."""
    assert main(["report", "--json", "--data-dir", str(tree), "--state-dir", str(state),
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_figure_equals_the_truth(seed: int, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Each figure of report --json equals the generator's ground truth."""
    truth = generate(tmp_path / "tree", GenOptions(seed=seed, sessions=6))
    got = report(tmp_path / "tree", tmp_path / "state", capsys)
    assert_matches(got, truth)


def test_second_run_reads_nothing_and_deletion_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second run reads no old bytes; deleting every transcript changes no figure."""
    truth = generate(tmp_path / "tree", GenOptions(seed=4, sessions=5))
    state = tmp_path / "state"
    first = report(tmp_path / "tree", state, capsys)
    bytes_after_first = _bytes_read(state)
    second = report(tmp_path / "tree", state, capsys)
    assert _bytes_read(state) == bytes_after_first
    assert second == first
    shutil.rmtree(tmp_path / "tree" / "projects")
    assert_matches(report(tmp_path / "tree", state, capsys), truth)


def _bytes_read(state: Path) -> int:
    from exporter.sqlite import sqlite3

    con = sqlite3.connect(state / "ledger.sqlite3")
    try:
        return int(con.execute("SELECT value FROM counters WHERE name='bytes_read'").fetchone()[0])
    finally:
        con.close()


def test_killed_at_random_points_then_exact(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Runs killed with SIGKILL at random points of their ingest, then a clean run: the truth."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    truth = generate(tree, GenOptions(seed=9, sessions=10, requests_per_session=150,
                                      target_bytes=30_000_000))
    total = int(truth["totals"]["requests"])
    rng = random.Random(9)
    mid_ingest = 0
    for _ in range(8):
        target = next_kill_target(rng, state, total)
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(tree),
             "--state-dir", str(state), "--batch-mb", "0.25", "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        def reached(n: int = target, run: subprocess.Popen[bytes] = proc) -> bool:
            return run.poll() is not None or ledger_rows(state) >= n

        poll(reached, 120, "the run's rows", interval=0.005, retry=(OSError, sqlite3.Error))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        mid_ingest += killed_mid_ingest(state, total)
    assert mid_ingest, "no kill landed in the middle of an ingest"
    assert_matches(report(tree, state, capsys), truth)
