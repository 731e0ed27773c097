"""Figures on 20,000 distinct model ids (and projects): page build, summary.json, text reports.

Usage: python3 -m bench.many_names [--names 20000]

Writes one transcript whose every request names its own model id (and, in a
second tree, its own project), ingests it with ``report --json``, then measures:
``/api/summary.json``'s size, the page's build (figures, HTML and JSON) time and
peak RSS in a child process, and each text report's bytes and time as a process.
docs/reliability.md quotes the figures (issue "round 3", item 14).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import Run, exporter_cmd

_PAGE = """
import resource, sys, time
from pathlib import Path
from exporter.ingest.discover import projects_dirs
from exporter.ledger.store import Ledger
from exporter.projections.class_prices import ClassPrices
from exporter.projections.periods import UTC_ZONE
from exporter.projections.pricing import RateTable
from exporter.serve import page, page_figures
tree, state = Path(sys.argv[1]), Path(sys.argv[2])
ledger = Ledger(state / "ledger.sqlite3")
source = page_figures.LedgerSource(ledger, projects_dirs([tree]), ClassPrices.of(RateTable.load()),
                                   UTC_ZONE, budgets={})
start = time.perf_counter()
html, body = page.routes(source, "bench")["/"], None
b"".join(html({"PATH_INFO": "/"}, lambda *a: None))
took = time.perf_counter() - start
body = b"".join(page.routes(source, "bench")["/api/summary.json"]({}, lambda *a: None))
print(took, len(body), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def write(root: Path, names: int, *, projects: bool) -> Path:
    """One session file per tree; each request its own model id (or its own project)."""
    where = root / "projects" / "-home-u-p"
    where.mkdir(parents=True)
    now = time.time() - 3600
    with (where / "s.jsonl").open("w") as out:
        for i in range(names):
            ts = datetime.fromtimestamp(now - (names - i) * 60, UTC)
            rec = {"type": "assistant", "sessionId": f"s{i % 50}", "timestamp":
                   ts.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                   "cwd": f"/home/u/p{i:05d}" if projects else "/home/u/p",
                   "message": {"id": f"m{i}", "model": "claude-opus-4-6" if projects
                               else f"claude-many-{i:05d}", "usage": {
                                   "input_tokens": 3, "output_tokens": 10,
                                   "cache_read_input_tokens": 100,
                                   "cache_creation_input_tokens": 20}},
                   "requestId": f"r{i}"}
            out.write(json.dumps(rec) + "\n")
    return root / "projects"


def measure_output(cmd: list[str], out: Path) -> tuple[Run, int]:
    """Run ``cmd`` with stdout to ``out``: its wall time, CPU, peak RSS, and bytes written."""
    with out.open("wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.DEVNULL)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024), out.stat().st_size


def main() -> None:
    """Build the trees, measure, print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", type=int, default=20_000)
    args = parser.parse_args()
    print("| tree | surface | bytes | seconds | peak RSS |\n|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-names-") as tmp:
        for kind in ("models", "projects"):
            tree = write(Path(tmp) / kind, args.names, projects=kind == "projects")
            state = Path(tmp) / f"state-{kind}"
            base = ["--data-dir", str(tree), "--state-dir", str(state), "--timezone", "UTC"]
            subprocess.run(exporter_cmd("report", "--json", *base), check=True,
                           stdout=subprocess.DEVNULL)
            out = subprocess.run([sys.executable, "-c", _PAGE, str(tree), str(state)],
                                 check=True, capture_output=True, text=True).stdout.split()
            print(f"| {kind} | page build; /api/summary.json | {int(out[1]):,} | "
                  f"{float(out[0]):.2f} | {float(out[2]):.0f} MB |")
            for view in ("summary", "daily", "project", "session"):
                flags = ("--breakdown",) if view == "daily" else ()
                cmd = exporter_cmd("report", view, *flags, *base)
                run, size = measure_output(cmd, Path(tmp) / "out.txt")
                print(f"| {kind} | report {view} {' '.join(flags)} | {size:,} | "
                      f"{run.wall:.2f} | {run.rss_mb:.0f} MB |")


if __name__ == "__main__":
    main()
