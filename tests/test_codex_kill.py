"""kill -9 of a real `serve` while it ingests a large generated Codex home: then exact."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from exporter.sqlite import sqlite3
from exporter.synth.codex import CodexOptions, generate_home
from tests.support.codex import expected, figures, ledger_sums, truth_sums
from tests.support.ledgers import killed_mid_ingest, ledger_rows, next_kill_target
from tests.support.process import Serve
from tests.support.wait import poll

SERVE_FLAGS = ("--workers", "1", "--batch-mb", "0.25")  # many small commits to land between


def test_serve_killed_mid_ingest_then_restarted_counts_the_truth(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Serve SIGKILLed at random points of its ingest, then run to the end: the truth."""
    home, state = tmp_path / "home", tmp_path / "state"
    truth = generate_home(home, CodexOptions(seed=9, sessions=12, target_bytes=40_000_000))
    total = int(truth["totals"]["requests"])
    rng = random.Random(9)
    mid_ingest = 0
    for _ in range(4):
        target = next_kill_target(rng, state, total)
        serve = Serve(home, state, *SERVE_FLAGS, wait=False)

        def reached(n: int = target, run: Serve = serve) -> bool:
            return not run.alive() or ledger_rows(state) >= n

        try:
            poll(reached, 120, "the run's rows", interval=0.005, retry=(OSError, sqlite3.Error))
        finally:
            serve.kill9()
        mid_ingest += killed_mid_ingest(state, total)
    assert mid_ingest, "no kill landed in the middle of an ingest"
    serve = Serve(home, state, *SERVE_FLAGS)
    try:
        poll(lambda: ledger_rows(state) == total, 120, "every turn in the ledger",
             retry=(OSError, sqlite3.Error))
    finally:
        assert serve.stop() == 0
    assert ledger_sums(state / "ledger.sqlite3") == truth_sums(truth)
    got = figures(home, state, capsys)
    want = expected(truth)
    assert got == want
