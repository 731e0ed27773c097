"""A Prometheus as a user has it after following docs/backfill.md, for looking at dashboards.

What a user does on the first day, step by step, with the real tools:

1. Claude Code has left a few days of transcripts (generated: ``HISTORY_H``
   hours ending about three hours ago, every quirk of the format included);
2. ``claude-code-exporter backfill --until T0`` writes the ledger's history with
   the scrape's target labels, ``promtool tsdb create-blocks-from openmetrics``
   turns it into blocks, and Prometheus starts on them;
3. the exporter (``serve``, with budgets) is scraped from T0 on, in the job
   ``claude-code`` together with a second exporter target that is down, next to
   a ``blackbox`` job whose probe fails, as in the shipped prometheus.yml on a
   machine without a blackbox exporter;
4. the recording rules' history of the last ``RULES_H`` hours comes from the one
   command of docs/backfill.md (``promtool tsdb create-blocks-from rules``
   against this Prometheus), whose blocks are moved in before a restart;
5. a live session then makes a few requests and a transcript gets a malformed
   line, so the gauges and the "now" figures have something to show;
6. the status line (``claude-code-exporter statusline``) recorded the plan
   windows all along: its samples fit the generated requests (``tests.support.plan``),
   so ``backfill`` and ``serve`` both find them in their state dir's spool, and
   a few live refreshes move the 5-hour figure while Prometheus scrapes.

Scrapes and rule evaluations run every ``INTERVAL`` (short, so that the live
part settles quickly); the history is at the backfill's resolution.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from exporter.projections.pricing import RateTable
from exporter.synth import GenOptions, generate
from exporter.synth.demo import LiveSession
from tests.support import plan
from tests.support.net import LOOPBACK
from tests.support.paths import ROOT
from tests.support.process import Serve, stopping
from tests.support.prometheus import PromServer, require_binary
from tests.support.wait import poll

RULES_DIR = ROOT / "deploy" / "prometheus" / "rules"
RECORDING_FILE = RULES_DIR / "claude-code-recording.yml"
ALERTS_FILE = RULES_DIR / "claude-code-alerts.yml"

JOB = "claude-code"
INSTANCE, USER = "ws-1:9477", "alice"  # target labels of the live exporter (and the backfill)
DEAD_USER = "bob"  # the exporter target that is down
HISTORY_H = 4 * 24 + 3  # generated history: sessions start this many hours before now
SEED, SESSIONS, REQUESTS = 7, 46, 12
DAY_BUDGET_USD, MONTH_BUDGET_USD = 30.0, 400.0
LIVE_REQUESTS = 4
RULES_H = 36  # hours of recording-rule history backfilled
INTERVAL = "2s"


@dataclass
class HistoryStack:
    """The running Prometheus and exporter, and what they were built from."""

    base: Path
    tree: Path
    prom: PromServer
    daemon: Serve
    dead_address: str
    probe_address: str
    until: int  # T0: end of the backfill, start of the live scrapes (unix seconds)
    rules_start: int  # where the recording rules' backfill starts (a full hour)
    truth: dict[str, Any]
    requests: int  # rows the exporter's ledger holds after the live requests
    plan: dict[str, float]  # the last live status-line figure of each window, percent
    plan_usd: tuple[float, float]  # USD per 1 % the samples were made with (5-hour, weekly)


def _run(argv: list[str], timeout: float = 300) -> str:
    """Run a command; raise with its output if it fails; return its stdout."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n"
                           f"{done.stdout}{done.stderr}")
    return done.stdout


def _refusing(cleanup: Callable[[Callable[[], object]], None]) -> str:
    """A loopback address whose port is bound but never listens: connections are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    cleanup(sock.close)
    sock.bind((LOOPBACK, 0))
    return f"{LOOPBACK}:{sock.getsockname()[1]}"


def _config(daemon: Serve, dead: str, probe: str) -> str:
    """The shipped layout: job claude-code (two exporters, one down) and a failing blackbox job."""
    exporter = {
        "job_name": JOB,
        "static_configs": [
            {"targets": [f"{LOOPBACK}:{daemon.port}"],
             "labels": {"instance": INSTANCE, "user": USER}},
            {"targets": [dead], "labels": {"user": DEAD_USER}},
        ],
    }
    blackbox = {
        "job_name": "blackbox", "metrics_path": "/probe",
        "params": {"module": ["anthropic_api"]},
        "static_configs": [{"targets": ["https://api.anthropic.com"]}],
        "relabel_configs": [
            {"source_labels": ["__address__"], "target_label": "__param_target"},
            {"source_labels": ["__param_target"], "target_label": "instance"},
            {"target_label": "__address__", "replacement": probe},
        ],
    }
    return json.dumps({
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [str(RECORDING_FILE), str(ALERTS_FILE)],
        "scrape_configs": [exporter, blackbox],
    }, indent=2)


def _iso(ts: float) -> str:
    """RFC 3339 UTC, as the command lines take times."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _move_blocks(source: Path, storage: Path) -> int:
    """Move promtool's block directories into a TSDB directory; return how many."""
    moved = 0
    for block in sorted(source.iterdir()):
        if (block / "meta.json").exists():
            shutil.move(str(block), storage / block.name)
            moved += 1
    return moved


def _ledger_rows(prom: PromServer) -> float:
    """Ledger rows of the live exporter as Prometheus last scraped them (-1: none yet)."""
    found = prom.query(f'claude_code_exporter_ledger_requests{{instance="{INSTANCE}"}}')
    return float(found[0]["value"][1]) if found else -1.0


def start(base: Path, cleanup: Callable[[Callable[[], object]], None]) -> HistoryStack:
    """Build the whole stack under ``base``; ``cleanup`` receives each stop function."""
    promtool = require_binary("promtool")
    require_binary("prometheus")
    now = time.time()
    tree = base / "claude"
    truth = generate(tree, GenOptions(
        seed=SEED, sessions=SESSIONS, requests_per_session=REQUESTS,
        start=datetime.fromtimestamp(now, UTC).replace(microsecond=0)
        - timedelta(hours=HISTORY_H)))
    until = int(now) // 60 * 60
    # The status line's samples over the same history, in both state dirs' spools.
    pricing = RateTable.load()
    past = plan.requests_of(tree, base / "plan-scratch")
    usd_5h, usd_7d = plan.sizes(past, pricing)
    samples = plan.refreshes(past, pricing, usd_5h=usd_5h, usd_7d=usd_7d)
    for state in (base / "backfill-state", base / "state"):
        plan.record(state, samples)
    history = base / "history.om"
    _run([sys.executable, "-m", "exporter", "backfill", "--data-dir", str(tree),
          "--state-dir", str(base / "backfill-state"), "--output", str(history),
          "--until", _iso(until), "--label", f"instance={INSTANCE}", "--label", f"user={USER}",
          "--log-level", "error"])
    _run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
          "--max-block-duration=744h", str(history), str(base / "blocks")])
    storage = base / "tsdb"
    storage.mkdir()
    _move_blocks(base / "blocks", storage)

    daemon = Serve(tree, base / "state", "--budget-day-usd", str(DAY_BUDGET_USD),
                   "--budget-month-usd", str(MONTH_BUDGET_USD))
    cleanup(daemon.stop)
    requests = int(truth["totals"]["requests"])
    dead, probe = _refusing(cleanup), _refusing(cleanup)
    prom = PromServer(_config(daemon, dead, probe), base / "prometheus", storage=storage,
                      extra_args=["--storage.tsdb.retention.time=100y"])
    cleanup(prom.stop)
    prom.start(ready_timeout=60)
    prom.wait_for(f'claude_code_exporter_ledger_requests{{instance="{INSTANCE}"}} == {requests}',
                  timeout=90)

    # docs/backfill.md, "Recording rules over the backfilled history": one command,
    # over the last RULES_H hours (the docs say 8 days; fewer here to spare the CPU).
    rules_start = (until - RULES_H * 3600) // 3600 * 3600
    _run([promtool, "tsdb", "create-blocks-from", "rules", "--quiet", f"--url={prom.url}",
          f"--start={_iso(rules_start)}", f"--end={_iso(until)}",
          f"--output-dir={base / 'rule-blocks'}", str(RECORDING_FILE)], timeout=600)
    prom.stop()
    if not _move_blocks(base / "rule-blocks", storage):
        raise RuntimeError("promtool wrote no recording-rule blocks")
    prom.start(ready_timeout=60)

    requests += _live(tree, prom, requests)
    figures = _live_plan(base / "state", prom, samples[-1][1])
    return HistoryStack(base, tree, prom, daemon, dead, probe, until, rules_start, truth,
                        requests, figures, (usd_5h, usd_7d))


def _live(tree: Path, prom: PromServer, requests: int) -> int:
    """A few requests of a live session and one malformed line; wait until scraped."""
    prom.wait_for(f'count_over_time(up{{instance="{INSTANCE}"}}[1m]) >= 2', timeout=60)
    live = LiveSession(tree, seed=SEED)
    live.step()
    # The session's series are new: Prometheus counts increases only once it has seen them.
    poll(lambda: _ledger_rows(prom) == requests + 1, 60, "first live request scraped")
    for _ in range(LIVE_REQUESTS - 1):
        live.step()
    rejected = f'sum(claude_code_exporter_rejected_lines_total{{instance="{INSTANCE}"}})'
    before = float(prom.query(rejected)[0]["value"][1])
    with live.path.open("ab") as fh:
        fh.write(b"{this line is not json\n")
    expected = requests + LIVE_REQUESTS
    poll(lambda: _ledger_rows(prom) == expected, 60, "live requests scraped")
    prom.wait_for(f'sum(claude_code_request_context_tokens_count{{instance="{INSTANCE}"}}) '
                  f'== {expected}', timeout=60)
    prom.wait_for(f"{rejected} > {before}", timeout=60)
    return LIVE_REQUESTS


def _live_plan(state: Path, prom: PromServer, last: dict[str, Any]) -> dict[str, float]:
    """Three live refreshes with a rising 5-hour figure, each waited for in Prometheus."""
    now = time.time()
    windows = {name: (float(w["used_percentage"]), int(w["resets_at"]))
               for name, w in last["rate_limits"].items()}
    pct, reset = windows["five_hour"]
    if reset < now + 600:  # the history's last 5-hour window is over: a new one starts
        # An hour in at 30 %: a pace that runs out before the reset, so the pace
        # panels (projection, time to the limit) have a figure to draw.
        pct, reset = 30.0, int(now) + 4 * 3600
    week_pct, week_reset = windows["seven_day"]
    for step in range(1, 4):
        windows = {"five_hour": (min(pct + 3 * step, 99.0), reset),
                   "seven_day": (min(week_pct + step, 99.0), week_reset)}
        plan.record_now(state, plan.payload(time.time(), windows))
        want = windows["five_hour"][0] / 100
        prom.wait_for(f'claude_code_plan_window_used_ratio{{instance="{INSTANCE}", '
                      f'window="five_hour"}} == {want}', timeout=60)
    return {name: value for name, (value, _) in windows.items()}


@contextlib.contextmanager
def running(base: Path) -> Iterator[HistoryStack]:
    """The stack, stopped on exit (tests and manual use alike)."""
    with stopping() as cleanup:
        yield start(base, cleanup)


def main() -> int:
    """Start the stack, draw the dashboards into ``docs/img``, stop (for the screenshots)."""
    import tempfile

    from grafana import render

    with tempfile.TemporaryDirectory() as tmp, running(Path(tmp)) as stack:
        return render.main(["--url", stack.prom.url, "--out", str(ROOT / "docs" / "img"),
                            *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
