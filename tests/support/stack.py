"""One real exporter and one real Prometheus with the shipped rules, with two hours of history.

Test modules query the same stack through the session fixture ``shared_stack``
(registered by tests/conftest.py): pytest starts it once, on first use, hands a
failure or a skip to every test that asks, and stops it at the end of the
session, even when a test fails.

Why history: a Prometheus that starts scraping now has no past, so rules over
long windows see little. ``increase(...[1d])`` sees only what grows while it
scrapes, and ``claude_code:cost_usd:increase30d`` sums ``rate1h`` at each *full
hour* (a ``[30d:1h]`` subquery, aligned to the epoch), so it has no sample at all
until Prometheus has recorded ``rate1h`` before a full hour. The stack therefore
gives Prometheus the two hours it would have scraped, built from the real daemon:

1. a generated transcript tree whose sessions ended about 1.5 days ago is served
   by ``claude-code-exporter serve`` (``tests.support.process.Serve``);
2. at four *stages* (-105, -75, -45 and -25 minutes, on the transcript clock)
   copies of existing requests (same model, project and source, so the same
   series; new ids) are appended to the transcripts, and the daemon is scraped
   after each stage has settled (``append_stage`` says which gap buckets the
   copies fall in);
3. those real scrapes become one sample per minute from -120 to -1 minutes
   (each minute shows the latest stage at or before it) with the target labels
   Prometheus would add, and ``promtool tsdb create-blocks-from openmetrics``
   turns them into TSDB blocks;
4. a first Prometheus serves those blocks and ``promtool tsdb create-blocks-from
   rules`` evaluates the shipped recording rules over the same two hours (as a
   Prometheus running then would have);
5. a second Prometheus starts on both sets of blocks, scrapes the daemon every
   second with the shipped recording and alerting rules, and once it has scraped,
   one more stage is appended *now*, so rates over short windows see live growth.

Gauges computed from the wall clock at scrape time (active sessions, warm KV) are
as the daemon saw them when each stage was scraped, not as they were at the
stage's minute: they are never asserted on the backfilled part.

The job also has a second target, a loopback port that refuses connections,
with its own ``user`` label: ``up`` is 0 there, so the exporter-down alert has
something to find, and dashboards see two instances and two users.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from exporter.ingest.parse import parse_lines
from exporter.synth import GenOptions, generate
from tests.support.exposition import total
from tests.support.net import LOOPBACK
from tests.support.paths import ROOT
from tests.support.process import Serve, stopping
from tests.support.prometheus import PromServer, require_binary
from tests.support.wait import poll

RULES_DIR = ROOT / "deploy" / "prometheus" / "rules"
RECORDING_FILE = RULES_DIR / "claude-code-recording.yml"
ALERTS_FILE = RULES_DIR / "claude-code-alerts.yml"

JOB = "claude-code"
USER = "alice"  # target label of the daemon
DEAD_USER = "bob"  # target label of the refusing target
TEAM = "platform"  # team target label of both (the team dashboard lists it)
DAY_BUDGET_USD = 0.01  # tiny: any spend in the last 24 h exceeds it
MONTH_BUDGET_USD = 1_000_000.0  # huge: never exceeded
HISTORY_MIN = 120  # backfilled minutes before "now"
STAGES_MIN = (-105, -75, -45, -25)  # appended requests, minutes relative to "now"
# Three copies per template and stage: (seconds from the stage, cold cache?).
COPIES = ((-12 * 60, True), (-11 * 60, False), (0, False))
STEP_S = 60  # spacing of backfilled samples (a scrape a minute)
BLOCK_S = 2 * 3600  # TSDB block length the backfill tools use
OM_TYPE = "application/openmetrics-text; version=1.0.0"



@dataclass
class Snapshot:
    """One real scrape of the daemon (OpenMetrics text) and when it counts."""

    at: float  # unix seconds: the stage's time, or the start of the history for the first
    text: str


@dataclass
class Stack:
    """The running daemon and Prometheus, with what the tests compare against."""

    base: Path
    tree: Path
    now: float  # the stack's reference time (unix seconds)
    daemon: Serve
    prom: PromServer
    dead_address: str
    requests: int  # rows the daemon's ledger holds
    snapshots: list[Snapshot] = field(default_factory=list)
    initial: dict[str, Any] = field(default_factory=dict)  # families before any stage
    final: dict[str, Any] = field(default_factory=dict)  # families after the latest stage
    stages: int = 0

    @property
    def address(self) -> str:
        """The daemon's ``host:port``, which is its ``instance`` label."""
        return f"{LOOPBACK}:{self.daemon.port}"

    def live_stage(self, copies: tuple[tuple[int, bool], ...] = ((0, False),)) -> None:
        """Append requests stamped now, wait until Prometheus has scraped them.

        A module that runs long after the stack started calls this first, so
        rates over 5-minute windows and the active-session gauges are current.
        The default is one warm copy per template, at the current time, so the
        transcripts stay in time order whatever ran before.
        """
        self.stages += 1
        self.requests += append_stage(self.tree, f"live{self.stages}", time.time(), copies)
        self.final = poll(lambda: _settled(self.daemon, self.requests), 60, "live stage settled")
        # Counters move at once, histograms after the settle time: wait for both.
        target = f'instance="{self.address}"'
        self.prom.wait_for(
            f"claude_code_exporter_ledger_requests{{{target}}} == {self.requests}", timeout=60)
        self.prom.wait_for(
            f"sum(claude_code_request_context_tokens_count{{{target}}}) == {self.requests}",
            timeout=60,
        )


# ------------------------------------------------------------------ transcripts


def _iso(ts: float) -> str:
    """A transcript timestamp: ISO 8601 UTC with milliseconds and ``Z``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _templates(path: Path) -> list[dict[str, Any]]:
    """The last top-level request record of each model in one transcript file.

    Only lines the exporter's own parser reads as exactly one request and no
    rejection qualify, so copies are valid requests of the same series.
    """
    last: dict[str, dict[str, Any]] = {}
    for raw in path.read_bytes().splitlines():
        if len(raw) > 1_000_000 or b'"assistant"' not in raw:
            continue
        parsed = parse_lines(raw + b"\n")
        if len(parsed.requests) != 1 or any(parsed.counts.rejected.values()):
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("type") == "assistant":
            last[str(rec["message"].get("model"))] = rec
    return list(last.values())


def _cold(usage: dict[str, Any]) -> None:
    """Turn a request's cache reads into cache writes, as after the cache expired."""
    read = int(usage.get("cache_read_input_tokens") or 0)
    usage["cache_read_input_tokens"] = 0
    usage["cache_creation_input_tokens"] = int(usage.get("cache_creation_input_tokens") or 0) + read
    split = usage.get("cache_creation")
    if isinstance(split, dict):
        ttl = "ephemeral_1h_input_tokens" if split.get("ephemeral_1h_input_tokens") else (
            "ephemeral_5m_input_tokens")
        split[ttl] = int(split.get(ttl) or 0) + read


def append_stage(tree: Path, stage: str, at: float,
                 copies: tuple[tuple[int, bool], ...] = COPIES) -> int:
    """Append copies of each file's latest request per model around ``at``; return how many.

    By default, per template three copies (``COPIES``): at ``at`` - 12 min with a
    cold cache (every prompt token written, none read), at - 11 min and at ``at``
    as the template. After
    the session's previous request (1.5 days earlier for the first stage, 13 to
    18 minutes for the others) they fall in the gap buckets ``gt_1h`` (first
    stage) or ``5m_to_1h``, then ``lt_5m``, then ``5m_to_1h``, so the cache-write
    share differs by bucket as measured on real use (rewrites after an idle hour).
    """
    n = 0
    for path in sorted((tree / "projects").rglob("*.jsonl")):
        lines = []
        for rec in _templates(path):
            for offset, cold in copies:
                n += 1
                copy = json.loads(json.dumps(rec))
                copy["message"]["id"] = f"msg_{stage}_{n:04d}"
                copy["requestId"] = f"req_{stage}_{n:04d}"
                copy["uuid"] = f"{stage}-{n:04d}"
                copy["timestamp"] = _iso(at + offset)
                if cold:
                    _cold(copy["message"]["usage"])
                lines.append(json.dumps(copy, separators=(",", ":")).encode() + b"\n")
        if lines:
            with path.open("ab") as fh:
                fh.write(b"".join(lines))
    return n


def _families_and_text(daemon: Serve) -> tuple[dict[str, Any], str]:
    """One scrape: parsed families and the OpenMetrics text of a second scrape."""
    families = daemon.scrape()
    req = urllib.request.Request(daemon.url + "/metrics", headers={"Accept": OM_TYPE})
    with urllib.request.urlopen(req, timeout=10) as resp:
        text: str = resp.read().decode()
    return families, text


def _settled(daemon: Serve, requests: int) -> dict[str, Any] | None:
    """The daemon's families once it holds ``requests`` rows, all in the histograms."""
    fams = daemon.scrape()
    hist = "claude_code_request_context_tokens"
    rows = total(fams, "claude_code_exporter_ledger_requests")
    if rows == requests and total(fams, hist, hist + "_count") == requests:
        return fams
    return None


# ------------------------------------------------------------------ backfill


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)$")


def _labelled(line: str, labels: str, ts: int) -> str:
    """A sample line with the target labels added and a timestamp appended."""
    m = _SAMPLE.match(line)
    if m is None:
        raise ValueError(f"unexpected exposition line: {line!r}")
    name, braces, value = m.groups()
    inner = labels if not braces or braces == "{}" else f"{labels},{braces[1:-1]}"
    return f"{name}{{{inner}}} {value} {ts}"


def _families(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """OpenMetrics text as family → (metadata lines, sample lines), in order."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    current: tuple[list[str], list[str]] | None = None
    for line in text.splitlines():
        if not line or line == "# EOF":
            continue
        if line.startswith("# "):
            name = line.split()[2]
            current = out.setdefault(name, ([], []))
            current[0].append(line)
        elif current is not None:
            current[1].append(line)
        else:
            raise ValueError(f"sample before any metadata: {line!r}")
    return out


def backfill_text(snapshots: list[Snapshot], start: int, end: int, labels: str) -> str:
    """OpenMetrics text with one sample a minute per series from ``start`` to ``end``.

    Each minute repeats the latest snapshot at or before it (the first snapshot
    covers the minutes before the second). Families stay contiguous and each
    series' timestamps increase, as the OpenMetrics backfiller requires.
    """
    parsed = [(snap.at, _families(snap.text)) for snap in snapshots]
    names: list[str] = []
    for _, fams in parsed:
        names += [n for n in fams if n not in names]
    out: list[str] = []
    for name in names:
        meta = next(fams[name][0] for _, fams in parsed if name in fams)
        out += meta
        for ts in range(start, end + 1, STEP_S):
            fams = next(f for at, f in reversed(parsed) if at <= ts or f is parsed[0][1])
            out += [_labelled(line, labels, ts) for line in fams.get(name, ([], []))[1]]
    out.append("# EOF")
    return "\n".join(out) + "\n"


def _run(argv: list[str]) -> None:
    """Run a command; raise with its output if it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        command = " ".join(argv)
        raise RuntimeError(f"{command} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")


def _place_blocks(blocks: list[Path], workdir: Path) -> None:
    """Copy TSDB blocks into every storage directory ``PromServer`` may use."""
    for attempt in (1, 2, 3):
        storage = workdir / f"data-{attempt}"
        storage.mkdir(parents=True, exist_ok=True)
        for block in blocks:
            shutil.copytree(block, storage / block.name)


def _blocks(directory: Path) -> list[Path]:
    """The block directories (ULID names) promtool wrote into ``directory``."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and (p / "meta.json").exists())


def _rules_start(start: int) -> int:
    """Where promtool's rule backfill may start so that it backfills anything at all.

    promtool (2.42) evaluates block by block (2 h, aligned to the epoch) and
    *stops* at the first block with no evaluation time in it, which happens
    when the start falls in the last evaluation interval of a block; then it
    writes nothing and exits 0. Such a start moves to the next block.
    """
    left = BLOCK_S - start % BLOCK_S
    return start + left if left <= 2 * STEP_S else start


def _config(scrape_configs: list[dict[str, Any]], rule_files: list[Path]) -> str:
    """A Prometheus config with 1 s scrape and evaluation intervals (JSON is YAML)."""
    return json.dumps(
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": scrape_configs,
        },
        indent=2,
    )


# ------------------------------------------------------------------ the stack


def start(base: Path, cleanup: Callable[[Callable[[], object]], None]) -> Stack:
    """Build the whole stack under ``base``; ``cleanup`` receives each stop function."""
    promtool = require_binary("promtool")
    require_binary("prometheus")
    now = time.time()
    tree = base / "claude"
    truth = generate(tree, GenOptions(seed=21, sessions=4, requests_per_session=40,
                                      start=datetime.now(UTC) - timedelta(days=2)))
    dead = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    cleanup(dead.close)
    dead.bind((LOOPBACK, 0))  # bound, never listening: connections are refused
    dead_address = f"{LOOPBACK}:{dead.getsockname()[1]}"

    daemon = Serve(tree, base / "state", "--budget-day-usd", str(DAY_BUDGET_USD),
                   "--budget-month-usd", str(MONTH_BUDGET_USD))
    cleanup(daemon.stop)
    requests = int(truth["totals"]["requests"])
    initial = poll(lambda: _settled(daemon, requests), 60, "initial scan settled")
    snapshots = [Snapshot(now - HISTORY_MIN * 60, _families_and_text(daemon)[1])]
    for k, minutes in enumerate(STAGES_MIN):
        at = now + minutes * 60
        requests += append_stage(tree, f"stage{k}", at)
        poll(partial(_settled, daemon, requests), 60, f"stage {k} settled")
        snapshots.append(Snapshot(at, _families_and_text(daemon)[1]))

    address = f"{LOOPBACK}:{daemon.port}"
    labels = f'job="{JOB}",instance="{address}",user="{USER}",team="{TEAM}"'
    start_ts, end_ts = int(now) - HISTORY_MIN * 60, int(now) - STEP_S
    om_file = base / "history.om.txt"
    om_file.write_text(backfill_text(snapshots, start_ts, end_ts, labels))
    raw_dir, rules_dir = base / "blocks-raw", base / "blocks-rules"
    _run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
          str(om_file), str(raw_dir)])

    history = PromServer(_config([], []), base / "prom-history")
    _place_blocks(_blocks(raw_dir), history.workdir)
    cleanup(history.stop)
    history.start(ready_timeout=60)
    _run([promtool, "tsdb", "create-blocks-from", "rules", "--quiet",
          f"--url={history.url}", f"--start={_rules_start(start_ts)}", f"--end={end_ts}",
          f"--eval-interval={STEP_S}s", f"--output-dir={rules_dir}", str(RECORDING_FILE)])
    history.stop()
    if not _blocks(rules_dir):
        raise RuntimeError(f"promtool wrote no recording-rule blocks into {rules_dir}")

    scrape = {
        "job_name": JOB,
        "static_configs": [
            {"targets": [address], "labels": {"user": USER, "team": TEAM}},
            {"targets": [dead_address], "labels": {"user": DEAD_USER, "team": TEAM}},
        ],
    }
    prom = PromServer(_config([scrape], [RECORDING_FILE, ALERTS_FILE]), base / "prometheus")
    _place_blocks(_blocks(raw_dir) + _blocks(rules_dir), prom.workdir)
    cleanup(prom.stop)
    prom.start(ready_timeout=60)
    stack = Stack(base, tree, now, daemon, prom, dead_address, requests, snapshots, initial)

    # Live: once Prometheus has scraped the daemon twice, append one more stage.
    prom.wait_for(f'count_over_time(up{{instance="{address}"}}[1m]) >= 2', timeout=60)
    stack.live_stage(COPIES)
    return stack


@contextlib.contextmanager
def standalone(base: Path) -> Iterator[Stack]:
    """Run a stack (the session fixture, or by hand for inspection); stop everything on exit."""
    with stopping() as cleanup:
        yield start(base, cleanup)


@pytest.fixture(scope="session")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The session's one stack: started on first use, stopped when the session ends."""
    with standalone(tmp_path_factory.mktemp("stack")) as stack:
        yield stack
