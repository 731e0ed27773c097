"""Teams at scale on one machine: cardinality and cost per developer, measured.

Usage: python3 -m bench.teams [--exporters 50] [--minutes 10] [--sessions 8]
                              [--policy-sessions 60] [--request-every 30]

1. Series per exporter under each ``project_label`` policy: one generated tree
   (``--policy-sessions`` sessions) served four times, ``/metrics`` counted.
2. The team stack of ``tests/support/teamstack.py`` with ``--exporters`` exporters, each
   over its own generated tree (``--sessions``), scraped by one Prometheus at the
   shipped intervals (15 s scrape, 1 m rules; shipped config, rules and team
   rules) that remote-writes to VictoriaMetrics. For ``--minutes`` every exporter
   gets one new request every ``--request-every`` seconds (a person at work);
   then Prometheus's and VictoriaMetrics' own counters, process CPU and RSS are
   read at both ends of that window.

Prints Markdown tables for docs/teams.md and writes ``bench/out/teams.json``.
Loopback only; every loop is bounded by the run's deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.common import OUT, exporter_cmd, machine
from exporter.synth import GenOptions, generate
from exporter.synth.demo import LiveSession
from tests.support import teamstack
from tests.support.exposition import total
from tests.support.net import http_get
from tests.support.process import Serve
from tests.support.teamstack import Spec, TeamStack
from tests.support.vmserver import VMServer
from tests.support.wait import poll

POLICIES = ("basename", "full", "hash", "none")
MONTH_S = 30 * 86400
TEAM_SIZE = 10


# ------------------------------------------------------------ processes


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def own_metrics(url: str) -> dict[str, float]:
    """A server's own ``/metrics``, samples summed by name (labels dropped)."""
    status, body = http_get(f"{url}/metrics", timeout=30)
    if status != 200:
        raise RuntimeError(f"{url}/metrics: HTTP {status}")
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
            for key, value in s.labels.items():
                if key == "type":  # keep VictoriaMetrics' per-type figures apart
                    name = f"{s.name}{{type={value}}}"
                    out[name] = out.get(name, 0.0) + s.value
    return out


# ------------------------------------------------------- 1. label policies


def exposition_series(daemon: Serve) -> int:
    """Samples in one scrape of ``/metrics`` (what Prometheus stores per scrape)."""
    status, body = http_get(f"{daemon.url}/metrics", timeout=30)
    assert status == 200, status
    return sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))


def series_by_policy(work: Path, sessions: int) -> dict[str, Any]:
    """Series one exporter exposes for one tree under each ``project_label`` policy."""
    tree = work / "policy-tree"
    truth = generate(tree, GenOptions(seed=7, sessions=sessions))
    requests = int(truth["totals"]["requests"])
    found: dict[str, Any] = {"sessions": sessions, "requests": requests}
    for policy in POLICIES:
        daemon = Serve(tree, work / f"policy-state-{policy}", "--project-label", policy)
        try:
            def done(d: Serve = daemon) -> bool:
                fams = d.scrape()
                hist = "claude_code_request_context_tokens"
                return total(fams, hist, hist + "_count") == requests
            poll(done, 300, f"{policy}: histograms hold every request")
            found[policy] = exposition_series(daemon)
        finally:
            daemon.stop()
    return found


# ------------------------------------------------------------ 2. the team


def team_specs(n: int) -> list[Spec]:
    """``n`` people in teams of ten, each on one machine with a daily budget."""
    return [Spec(f"dev{i:03d}", f"team{i // TEAM_SIZE:02d}", 1000 + i, budget_day_usd=40.0)
            for i in range(n)]


@dataclass
class Snapshot:
    """Counters and process figures at one moment of the measured window."""

    at: float
    prom: dict[str, float]
    vm: dict[str, float]
    cpu: dict[str, float]


def snapshot(stack: TeamStack) -> Snapshot:
    """Read both servers' own counters and every process's CPU time."""
    cpu = {"prometheus": cpu_seconds(pid(stack.prom)),
           "victoria-metrics": cpu_seconds(pid(stack.vm))}
    cpu["exporters"] = sum(cpu_seconds(m.daemon.proc.pid) for m in stack.members)
    return Snapshot(time.time(), own_metrics(stack.prom.url), own_metrics(stack.vm.url), cpu)


def pid(server: Any) -> int:
    """The process id of a running ``PromServer`` / ``VMServer``."""
    proc = server.process.proc if server.process is not None else None
    if proc is None:
        raise RuntimeError("server not running")
    return int(proc.pid)


def drive(stack: TeamStack, every: float, until: float) -> int:
    """One new request per exporter every ``every`` seconds until ``until``; return how many."""
    sessions = [LiveSession(m.tree, seed=i) for i, m in enumerate(stack.members)]
    gap = every / len(sessions)
    written, i = 0, 0
    next_at = time.time()
    while time.time() < until:
        sessions[i % len(sessions)].step()
        written, i = written + 1, i + 1
        next_at += gap
        time.sleep(max(0.0, next_at - time.time()))  # pacing of the load, bounded by `until`
    return written


def delta(a: Snapshot, b: Snapshot, side: str, name: str) -> float:
    """Growth of one counter of ``prom`` or ``vm`` between two snapshots."""
    before, after = getattr(a, side), getattr(b, side)
    return float(after.get(name, 0.0) - before.get(name, 0.0))


def team_run(work: Path, n: int, minutes: float, sessions: int, every: float) -> dict[str, Any]:
    """Start the team stack at the shipped intervals, load it, and measure it."""
    shipped = yaml.safe_load(teamstack.SHIPPED_CONFIG.read_text())["global"]
    started = time.time()
    with teamstack.running(
        work / "team", team_specs(n), gen=lambda seed: GenOptions(seed=seed, sessions=sessions),
        scrape_interval=shipped["scrape_interval"],
        evaluation_interval=shipped["evaluation_interval"], down_for=None,
    ) as stack:
        teamstack.wait_settled(stack, timeout=600)
        startup = time.time() - started
        poll(lambda: stack.prom.query(f'count(up{{job="{teamstack.JOB}"}} == 1) == {n}'), 120,
             "every target up")
        poll(lambda: stack.vm.query(f'count(up{{job="{teamstack.JOB}"}}) == {n}'), 120,
             "every target in VictoriaMetrics")
        first = snapshot(stack)
        requests = drive(stack, every, first.at + minutes * 60)
        stack.vm.force_flush()
        last = snapshot(stack)
        result = measure(stack, first, last, n)
        result.update({"startup_s": round(startup, 1), "requests_driven": requests,
                       "minutes": minutes, "sessions_per_tree": sessions,
                       "requests_per_tree": statistics.mean(
                           m.truth["totals"]["requests"] for m in stack.members),
                       "scrape_interval": shipped["scrape_interval"],
                       "evaluation_interval": shipped["evaluation_interval"]})
        result["query_ms"] = query_latency(stack)
    return result


def measure(stack: TeamStack, a: Snapshot, b: Snapshot, n: int) -> dict[str, Any]:
    """Per-exporter and per-server figures over the window between two snapshots."""
    seconds = b.at - a.at
    scraped = [float(s["value"][1]) for s in stack.prom.query(
        f'scrape_samples_scraped{{job="{teamstack.JOB}"}}')]
    status = stack.vm.tsdb_status()
    vm_rows = b.vm.get("vm_rows{type=storage/small}", 0) + b.vm.get("vm_rows{type=storage/big}", 0)
    vm_bytes = (b.vm.get("vm_data_size_bytes{type=storage/small}", 0)
                + b.vm.get("vm_data_size_bytes{type=storage/big}", 0))
    index_bytes = b.vm.get("vm_data_size_bytes{type=indexdb}", 0)
    return {
        "exporters": n,
        "window_s": round(seconds, 1),
        "samples_per_scrape": {"mean": statistics.mean(scraped), "min": min(scraped),
                               "max": max(scraped)},
        "prom_head_series": b.prom.get("prometheus_tsdb_head_series", 0),
        "prom_appended_per_s": delta(a, b, "prom", "prometheus_tsdb_head_samples_appended_total")
        / seconds,
        "remote_samples_per_s": delta(a, b, "prom", "prometheus_remote_storage_samples_total")
        / seconds,
        "remote_bytes_per_s": delta(a, b, "prom", "prometheus_remote_storage_bytes_total")
        / seconds,
        "vm_rows_per_s": delta(a, b, "vm", "vm_rows_inserted_total{type=promremotewrite}")
        / seconds,
        "vm_total_series": status["totalSeries"],
        "vm_rows_stored": vm_rows,
        "vm_storage_bytes": vm_bytes,
        "vm_index_bytes": index_bytes,
        "vm_bytes_per_row": vm_bytes / vm_rows if vm_rows else None,
        "cpu_percent": {k: 100 * (b.cpu[k] - a.cpu[k]) / seconds for k in a.cpu},
        "rss_mb": {
            "prometheus": rss_mb(pid(stack.prom)),
            "victoria-metrics": rss_mb(pid(stack.vm)),
            "exporter_mean": statistics.mean(rss_mb(m.daemon.proc.pid) for m in stack.members),
        },
    }


TEAM_QUERIES = {
    "USD per team (raw counters)": 'sum by (team) (claude_code_cost_usd_total{job="claude-code"})',
    "USD per person, 24 h": 'sum by (user) (increase(claude_code_cost_usd_total[1d]))',
    "tokens by model, org": 'sum by (model) (rate(claude_code_tokens_total[5m]))',
}


def query_latency(stack: TeamStack, repeat: int = 20) -> dict[str, float]:
    """Median wall time (ms) of a few team queries on VictoriaMetrics."""
    out = {}
    for name, expr in TEAM_QUERIES.items():
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            stack.vm.query(expr)
            times.append(time.perf_counter() - t0)
        out[name] = round(statistics.median(times) * 1000, 1)
    return out


# ------------------------------------------------------- 3. compression


def compression(work: Path, sessions: int) -> dict[str, Any]:
    """Bytes per sample in VictoriaMetrics for a busy developer's day at a 15 s interval.

    The exporter's own ``backfill`` writes the counters and histograms it would
    have exposed every 15 s over a generated day of work (``--anchor 15s``: every
    series at every step, as scrapes store them); VictoriaMetrics imports them,
    merges its parts, and reports rows and bytes on disk.
    """
    start = (datetime.now(UTC) - timedelta(days=1)).replace(microsecond=0)
    tree = work / "day-tree"
    truth = generate(tree, GenOptions(seed=5, sessions=sessions, start=start))
    history = work / "day.om"
    subprocess.run(exporter_cmd("backfill", "--data-dir", str(tree), "--state-dir",
                                str(work / "day-state"), "--output", str(history), "--step",
                                "15s", "--anchor", "15s", "--since", "1d", "--log-level",
                                "warning"), check=True, capture_output=True, timeout=600)
    vm = VMServer(work / "vm-compression")
    vm.start()
    try:
        samples = import_history(vm, history)
        vm.force_flush()
        vm.force_merge()

        sizes: list[float] = []

        def merged() -> dict[str, float] | None:
            """The metrics once every row is in a part and the parts stopped changing."""
            m = own_metrics(vm.url)
            rows = m.get("vm_rows{type=storage/small}", 0) + m.get("vm_rows{type=storage/big}", 0)
            busy = sum(v for k, v in m.items() if k.startswith("vm_active_merges{"))
            sizes.append(m.get("vm_data_size_bytes{type=storage/small}", 0)
                         + m.get("vm_data_size_bytes{type=storage/big}", 0))
            stable = len(sizes) > 20 and len(set(sizes[-20:])) == 1  # 20 polls = 1 s unchanged
            return m if rows >= samples and not busy and stable else None

        m = poll(merged, 300, "VictoriaMetrics done merging the day")
        series = vm.tsdb_status()["totalSeries"]
    finally:
        vm.stop()
    data = m["vm_data_size_bytes{type=storage/big}"] + m["vm_data_size_bytes{type=storage/small}"]
    return {"requests": truth["totals"]["requests"], "samples": samples, "series": series,
            "storage_bytes": data, "index_bytes": m["vm_data_size_bytes{type=indexdb}"],
            "bytes_per_sample": data / samples,
            "text_bytes": history.stat().st_size}


def import_history(vm: VMServer, history: Path, batch: int = 100_000) -> int:
    """Send an OpenMetrics file's samples to VictoriaMetrics (seconds → ms); return how many."""
    lines, count = [], 0
    with history.open(encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            head, _, ts = line.rstrip("\n").rpartition(" ")
            lines.append(f"{head} {int(float(ts) * 1000)}")
            if len(lines) >= batch:
                vm.import_prometheus(lines)
                count, lines = count + len(lines), []
    if lines:
        vm.import_prometheus(lines)
        count += len(lines)
    return count


# ------------------------------------------------------------- the tables


def sizing(team: dict[str, Any], day: dict[str, Any], developers: int) -> list[str]:
    """The sizing table: measured per developer at N exporters, extrapolated to ``developers``."""
    n = team["exporters"]
    series = team["vm_total_series"] / n
    rate = team["vm_rows_per_s"] / n
    per_sample = day["bytes_per_sample"]
    per_series = day["index_bytes"] / day["series"]
    month = rate * MONTH_S * per_sample + series * per_series
    unmerged = rate * MONTH_S * (team["vm_bytes_per_row"] or 0.0) + series * (
        team["vm_index_bytes"] / team["vm_total_series"])
    cpu = team["cpu_percent"]["victoria-metrics"] / 100 / team["vm_rows_per_s"]  # cores/(sample/s)
    big = developers / n
    return [
        f"| figure | per developer (measured, N = {n}) | {developers:,} developers "
        "(extrapolated) |",
        "|---|---:|---:|",
        f"| active series in VictoriaMetrics (raw + recorded) | {series:,.0f} | "
        f"{series * developers:,.0f} |",
        f"| samples/s at a {team['scrape_interval']} scrape | {rate:.1f} | "
        f"{rate * developers:,.0f} |",
        f"| remote-write traffic | {team['remote_bytes_per_s'] / n:,.0f} B/s | "
        f"{team['remote_bytes_per_s'] / n * developers / 1e6:,.1f} MB/s |",
        f"| disk per 30 days ({per_sample:.2f} B/sample + {per_series:,.0f} B index/series) | "
        f"{month / 1e6:,.1f} MB | {month * developers / 1e9:,.0f} GB |",
        f"| disk per 30 days, unmerged bound ({team['vm_bytes_per_row'] or 0:.2f} B/sample) | "
        f"{unmerged / 1e6:,.1f} MB | {unmerged * developers / 1e12:,.2f} TB |",
        f"| VictoriaMetrics CPU | {cpu * rate * 1000:.2f} milli-cores | "
        f"{cpu * rate * developers:.1f} cores |",
        f"| Prometheus CPU (scrape + rules + remote write) | "
        f"{team['cpu_percent']['prometheus'] / n * 10:.2f} milli-cores | "
        f"{team['cpu_percent']['prometheus'] / 100 * big:.1f} cores |",
    ]


def main() -> None:
    """Run both measurements and print the tables."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--exporters", type=int, default=50)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--policy-sessions", type=int, default=60)
    ap.add_argument("--request-every", type=float, default=30.0)
    ap.add_argument("--developers", type=int, default=10_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-teams-"))
    try:
        policies = series_by_policy(work, args.policy_sessions)
        day = compression(work, args.sessions)
        team = team_run(work, args.exporters, args.minutes, args.sessions, args.request_every)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "teams.json").write_text(json.dumps({"policies": policies, "day": day, "team": team,
                                                "machine": machine()}, indent=2))
    print(f"Machine: {machine()}\n")
    print(f"Series per exporter, one tree ({policies['sessions']} sessions, "
          f"{policies['requests']:,} requests):\n")
    print("| project_label | series |\n|---|---:|")
    for policy in POLICIES:
        print(f"| `{policy}` | {policies[policy]:,} |")
    print(f"\nA day at 15 s in VictoriaMetrics: {json.dumps(day, indent=1)}")
    print(f"\nTeam run: {json.dumps(team, indent=1)}\n")
    print("\n".join(sizing(team, day, args.developers)))


if __name__ == "__main__":
    main()
