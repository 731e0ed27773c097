"""Two builds and ccusage, cold and warm `report`, in alternating pairs on several trees.

Usage: python3 -m bench.paired --base DIR --new DIR --tree NAME=PATH [--tree ...]
                               [--ccusage node_modules/.bin/ccusage] [--rounds 9]

``--base`` and ``--new`` are checkouts of this project (a ``git worktree`` at
each commit); each run is ``python3 -m exporter report --json`` with
``PYTHONPATH`` at the checkout: cold (a new, empty state directory), then warm
(the same again, nothing new to read). Each round runs, per tree, a pair
base/new and a pair base/ccusage (``ccusage claude daily --json --offline``,
``CLAUDE_CONFIG_DIR`` at the tree), the order within a pair flipping from round
to round, so slow minutes of a shared machine hit both sides. A ratio is taken
within each pair; the table gives the median and quartiles of those ratios,
with the walls' medians. Our JSON must be byte-identical between the builds.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

Run = tuple[str, float, str]  # phase, wall seconds, digest of stdout


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall time and output digest of one run (bounded; a failure stops the bench)."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=600, check=False, cwd="/tmp")
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed: {proc.stderr.decode()[-500:]}")
    return wall, hashlib.sha1(proc.stdout).hexdigest()[:12]


def ours(checkout: Path, tree: Path) -> list[Run]:
    """A cold and a warm report of ``tree`` by the build at ``checkout``."""
    state = Path(tempfile.mkdtemp(prefix="paired-"))
    cmd = [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(tree),
           "--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    try:
        return [(phase, *_timed(cmd, env)) for phase in ("cold", "warm")]
    finally:
        shutil.rmtree(state, ignore_errors=True)


def ccusage(binary: Path, tree: Path) -> list[Run]:
    """The peer's daily report of ``tree`` (ccusage keeps no state: every run is cold)."""
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(tree)}
    return [("cold", *_timed([str(binary), "claude", "daily", "--json", "--offline"], env))]


def main() -> None:
    """Run the rounds and print one Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--new", type=Path, required=True)
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--ccusage", type=Path)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    ratios: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    walls: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    digests: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rnd in range(args.rounds):
        for name, path in trees.items():
            tree = Path(path)
            peers: dict[str, Callable[[], list[Run]]] = {
                "new": functools.partial(ours, args.new, tree)}
            if args.ccusage:
                peers["ccusage"] = functools.partial(ccusage, args.ccusage, tree)
            for i, (peer, run) in enumerate(peers.items()):
                first = (rnd + i) % 2 == 0
                a = ours(args.base, tree) if first else run()
                b = run() if first else ours(args.base, tree)
                base, other = (a, b) if first else (b, a)
                for (phase, bw, bd), (_, ow, od) in zip(base, other, strict=False):
                    ratios[(name, peer, phase)].append(ow / bw)
                    walls[(name, "base", phase)].append(bw)
                    walls[(name, peer, phase)].append(ow)
                    digests[(name, phase)].add(bd)
                    if peer == "new":
                        digests[(name, phase)].add(od)
    print("| tree | peer / base | phase | pairs | ratio median (Q1-Q3) | walls base / peer |")
    print("|---|---|---|---:|---|---|")
    for (name, peer, phase), rs in sorted(ratios.items()):
        q1, med, q3 = statistics.quantiles(rs, n=4, method="inclusive")
        print(f"| {name} | {peer} | {phase} | {len(rs)} | {med:.3f} ({q1:.3f}-{q3:.3f}) | "
              f"{statistics.median(walls[(name, 'base', phase)]):.2f} s / "
              f"{statistics.median(walls[(name, peer, phase)]):.2f} s |")
    same = all(len(d) == 1 for d in digests.values())
    print(f"\nour JSON byte-identical across builds and runs: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
