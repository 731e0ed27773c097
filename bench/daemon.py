"""The daemon under a generated month: start-up, latency, idle CPU, RSS, scrape time.

Usage: python3 -m bench.daemon [--mb 300] [--appends 100] [--scrapes 200] [--idle 30]
Prints a Markdown table for docs/benchmarks.md. Loopback only; bounded in time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench.common import machine, month_tree, tree_size
from tests.support.exposition import total
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    """Resident set size of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _sees(daemon: Serve, want: float) -> Callable[[], bool]:
    """A check that the daemon counts at least ``want`` requests."""
    return lambda: total(daemon.scrape(), "claude_code_requests") >= want


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(p / 100 * len(ordered)) - 1)]


def main() -> None:
    """Measure one daemon over a copy of the generated month."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--appends", type=int, default=100)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--idle", type=float, default=30.0)
    args = ap.parse_args()
    tree = month_tree(args.mb)
    work = Path(tempfile.mkdtemp(prefix="bench-daemon-"))
    try:
        _run(tree, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(tree: Path, work: Path, args: argparse.Namespace) -> None:
    live = work / "live" / "projects" / "-bench"
    live.mkdir(parents=True)
    started = time.perf_counter()
    daemon = Serve(tree, work / "state", "--data-dir", str(work / "live"))
    startup = time.perf_counter() - started
    try:
        pid = daemon.proc.pid
        base = total(daemon.scrape(), "claude_code_requests")
        lat = []
        target = live / "s.jsonl"
        for i in range(args.appends):
            line = jsonl(assistant(f"msg_bench_{i}", f"req_bench_{i}", session="bench"))
            t0 = time.perf_counter()
            with target.open("ab") as fh:
                fh.write(line)
            poll(_sees(daemon, base + i + 1), 10, "append visible")
            lat.append(time.perf_counter() - t0)
        scrape = []
        for _ in range(args.scrapes):
            t0 = time.perf_counter()
            with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as resp:
                size = len(resp.read())
            scrape.append(time.perf_counter() - t0)
        cpu0, t0 = _cpu_seconds(pid), time.perf_counter()
        end = t0 + args.idle
        while time.perf_counter() < end:  # idle window: nothing is written or scraped
            time.sleep(min(1.0, end - time.perf_counter()))
        idle = (_cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0)
        rss = _rss_mb(pid)
    finally:
        daemon.stop()
    size_b, files = tree_size(tree)
    print(f"Machine: {machine()}")
    print(f"Tree: {size_b / 1e6:.0f} MB in {files} files (+ one live file)\n")
    print("| figure | value |\n|---|---:|")
    print(f"| start-up to healthy (cold ledger, incl. ingest) | {startup:.2f} s |")
    print(f"| append-to-visible p50 / p99 ({args.appends} appends) | "
          f"{statistics.median(lat) * 1000:.0f} / {_pct(lat, 99) * 1000:.0f} ms |")
    print(f"| /metrics response p50 / p99 ({args.scrapes} scrapes, {size / 1024:.0f} KiB) | "
          f"{statistics.median(scrape) * 1000:.1f} / {_pct(scrape, 99) * 1000:.1f} ms |")
    print(f"| idle CPU over {args.idle:.0f} s | {idle * 100:.2f} % of a core |")
    print(f"| RSS after the run | {rss:.0f} MB |")


if __name__ == "__main__":
    main()
