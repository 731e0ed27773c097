"""First scrape of ``serve`` after an unclean stop, on a large ledger (round 3, #5).

Usage: python3 -m bench.unclean_start --baseline DIR [--copies 100] [--runs 3]

A generated history is ingested by ``report``; its rows are then copied
(``--copies`` times, new keys, same times) straight into the ledger by SQL,
to make a ledger of a year's size quickly (its rollups are not those rows':
only the start-up's reading of the file is measured). The clean-close stamp
is removed, as a kill -9 leaves it. Each run starts ``serve`` over a fresh
copy of that ledger, from this tree and from ``--baseline`` in turn, and
times process start → the first /metrics answering 200. Prints one JSON
object. Loopback only; bounded in time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import OUT
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate
from tests.support.net import LOOPBACK, free_port, http_get
from tests.support.wait import poll

COLUMNS = ("ts, model, session, project, source, input, output, cache_read, cache_write_5m, "
           "cache_write_1h, service_tier, inference_geo, speed, recorded_cost_usd, web_search, "
           "gap, context, roots")


def _ledger(work: Path, copies: int, env: dict[str, str]) -> Path:
    """A large ledger with no clean-close stamp; its state dir."""
    generate(work / "tree", GenOptions(seed=5, sessions=40))
    state = work / "made"
    subprocess.run([sys.executable, "-m", "exporter", "report", "--json", "--data-dir",
                    str(work / "tree" / "projects"), "--state-dir", str(state)],
                   check=True, capture_output=True, env=env, timeout=600)
    db = sqlite3.connect(state / "ledger.sqlite3", isolation_level=None)
    db.execute("BEGIN")
    for n in range(copies):
        db.execute(f"INSERT INTO requests (key, {COLUMNS}) SELECT key || ':{n}', {COLUMNS} "
                   "FROM requests WHERE key NOT LIKE '%:%'")
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    (state / "ledger.sqlite3.clean").unlink(missing_ok=True)
    return state


def _first_scrape(tree: Path, state: Path, data: Path, work: Path) -> float:
    """Seconds from starting serve (code from ``tree``) to its first /metrics 200."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--data-dir", str(data), "--state-dir",
         str(state), "--listen", f"{LOOPBACK}:{port}"], env=env, cwd=tree,
        stdout=subprocess.DEVNULL, stderr=(work / "serve.log").open("ab"), start_new_session=True)
    try:
        poll(lambda: http_get(f"http://{LOOPBACK}:{port}/metrics", timeout=5)[0] == 200, 600,
             "the first scrape", interval=0.01)
        return time.monotonic() - start
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def main() -> None:
    """Build the ledger, time the runs, print the medians."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="unclean-", dir=OUT))
    try:
        made = _ledger(work, args.copies, {**os.environ, "PYTHONPATH": str(here)})
        size = (made / "ledger.sqlite3").stat().st_size
        times: dict[str, list[float]] = {"baseline": [], "this": []}
        for _ in range(args.runs):
            for name, tree in (("baseline", args.baseline), ("this", here)):
                state = work / "state"
                shutil.rmtree(state, ignore_errors=True)
                shutil.copytree(made, state)
                times[name].append(_first_scrape(tree, state, work / "tree" / "projects", work))
        rows = sum(1 for _ in sqlite3.connect(made / "ledger.sqlite3").execute(
            "SELECT 1 FROM requests"))
        print(json.dumps({"ledger_mb": round(size / 2**20), "requests": rows,
                          **{f"{k}_first_scrape_s": round(statistics.median(v), 2)
                             for k, v in times.items()}}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
