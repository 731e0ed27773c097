"""Does pricing cost anything? Cold and warm `report`, this tree against another, alternating.

Usage: python3 -m bench.prices --peer /path/to/other/checkout [--mb 300] [--rounds 5]

The peer is a checkout of the same project at another commit (e.g. the previous
pricing: ``git archive <commit> | tar -x -C /tmp/peer``). Each round runs the
peer and this tree back to back on a fresh ledger, so machine noise hits both
alike; the figures are medians and the ratio of medians. This tree also runs
once per round with an empty price cache (the first start after an install or
upgrade of genai-prices).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import Run, machine, measure, month_tree, tree_size

HERE = Path(__file__).resolve().parent.parent


def _report(code: Path, tree: Path, state: Path, cache: Path) -> tuple[list[str], dict[str, str]]:
    """The report command run from ``code`` with its own price cache directory."""
    cmd = [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(tree),
           "--state-dir", str(state)]
    return cmd, {"PYTHONPATH": str(code), "XDG_CACHE_HOME": str(cache)}


def _round(code: Path, tree: Path, cache: Path) -> tuple[Run, Run]:
    """One cold (empty ledger) and one warm (nothing new) report."""
    state = Path(tempfile.mkdtemp(prefix="bench-prices-"))
    try:
        cmd, env = _report(code, tree, state, cache)
        return measure(cmd, env), measure(cmd, env)
    finally:
        shutil.rmtree(state)


def main() -> None:
    """Alternate the two trees and print a Markdown table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True, type=Path)
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tree = month_tree(args.mb)
    size, files = tree_size(tree)
    warm_cache = Path(tempfile.mkdtemp(prefix="bench-price-cache-"))
    results: dict[str, list[Run]] = {k: [] for k in
                                     ("peer cold", "peer warm", "this cold", "this warm",
                                      "this cold, empty price cache")}
    _round(HERE, tree, warm_cache)  # fill this tree's price cache (and the page cache)
    for _ in range(args.rounds):
        for name, code in (("peer", args.peer), ("this", HERE)):
            cold, warm = _round(code, tree, warm_cache)
            results[f"{name} cold"].append(cold)
            results[f"{name} warm"].append(warm)
        empty = Path(tempfile.mkdtemp(prefix="bench-price-cache-"))
        results["this cold, empty price cache"].append(_round(HERE, tree, empty)[0])
        shutil.rmtree(empty)
    shutil.rmtree(warm_cache)
    print(f"Machine: {machine()}; load {os.getloadavg()[0]:.1f}")
    print(f"Tree: {size / 1e6:.0f} MB in {files} files; {args.rounds} alternating rounds, "
          f"medians\n")
    print("| run | wall s | CPU s | wall vs peer | CPU vs peer |\n|---|---:|---:|---:|---:|")
    for name, runs in results.items():
        wall = statistics.median(r.wall for r in runs)
        cpu = statistics.median(r.cpu for r in runs)
        kind = "warm" if "warm" in name else "cold"
        peer = results[f"peer {kind}"]
        peer_wall = statistics.median(r.wall for r in peer)
        peer_cpu = statistics.median(r.cpu for r in peer)
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {wall / peer_wall:.3f} | "
              f"{cpu / peer_cpu:.3f} |")


if __name__ == "__main__":
    main()
