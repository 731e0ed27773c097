"""Plan limits end to end: the status line records, a running serve exposes, a restart keeps."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.exposition import total
from tests.support.plan import record_now
from tests.support.process import Serve
from tests.support.statusline import payload
from tests.support.wait import poll


def used(serve: Serve, window: str) -> float | None:
    """``claude_code_plan_window_used_ratio`` of one window, None while absent."""
    fams = serve.scrape()
    fam = fams.get("claude_code_plan_window_used_ratio")
    if fam is None:
        return None
    values = [s.value for s in fam.samples if s.labels.get("window") == window]
    return values[0] if values else None


def test_samples_recorded_while_serve_runs_reach_metrics_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    """A sample recorded beside a running serve shows in /metrics; a restart keeps it, once."""
    data, state = tmp_path / "claude", tmp_path / "state"
    (data / "projects").mkdir(parents=True)
    state.mkdir(mode=0o700)
    serve = Serve(data, state)
    try:
        assert used(serve, "five_hour") is None  # nothing recorded yet: no series
        started = time.monotonic()
        record_now(state, payload(five=35.0, seven=17.0))
        poll(lambda: used(serve, "five_hour") == 0.35, 10, "five_hour in /metrics")
        seen_after = time.monotonic() - started
        assert used(serve, "seven_day") == 0.17
        assert total(serve.scrape(), "claude_code_plan_window_samples") == 1
        record_now(state, payload(five=41.0, seven=18.0))
        poll(lambda: used(serve, "five_hour") == 0.41, 10, "second sample in /metrics")
        assert serve.stop() == 0
    finally:
        if serve.proc.poll() is None:
            serve.kill9()
    restarted = Serve(data, state)
    try:
        assert used(restarted, "five_hour") == 0.41
        assert total(restarted.scrape(), "claude_code_plan_window_samples") == 2
    finally:
        restarted.stop()
    # Not a timing test: the figure is printed for the benchmark notes only.
    print(f"plan sample visible after {seen_after:.2f} s")
