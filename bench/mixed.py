"""A mixed home (Claude Code and Codex): our cold and warm `report` against ccusage's `daily`.

Usage: python3 -m bench.mixed --claude TREE --codex HOME --ccusage node_modules/.bin/ccusage
                              [--rounds 9] [--new .]

Each round runs a pair: ours (``report --json --data-dir TREE --codex-home HOME``,
cold in a new state directory, then warm) and ccusage (``daily --json --offline``
with ``CLAUDE_CONFIG_DIR`` and ``CODEX_HOME`` set; it keeps no state, so every run
is cold), the order flipping from round to round so slow minutes of a shared
machine hit both. The table gives the median and quartiles of the ratios taken
within pairs (ours / ccusage), with the walls' medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.paired import _timed


def ours(checkout: Path, claude: Path, codex: Path) -> list[tuple[str, float]]:
    """Our cold and warm report of the mixed home."""
    state = Path(tempfile.mkdtemp(prefix="mixed-"))
    cmd = [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(claude),
           "--codex-home", str(codex), "--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    try:
        return [(phase, _timed(cmd, env)[0]) for phase in ("cold", "warm")]
    finally:
        shutil.rmtree(state, ignore_errors=True)


def ccusage(binary: Path, claude: Path, codex: Path) -> float:
    """The peer's unified daily report of both agents' logs."""
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(claude), "CODEX_HOME": str(codex)}
    return _timed([str(binary.resolve()), "daily", "--json", "--offline"], env)[0]


def main() -> None:
    """Run the rounds and print one Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claude", type=Path, required=True)
    ap.add_argument("--codex", type=Path, required=True)
    ap.add_argument("--ccusage", type=Path, required=True)
    ap.add_argument("--new", type=Path, default=Path("."))
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    ratios: dict[str, list[float]] = {"cold": [], "warm": []}
    walls: dict[str, list[float]] = {"cold": [], "warm": [], "ccusage": []}
    for rnd in range(args.rounds):
        if rnd % 2 == 0:
            runs, peer = ours(args.new, args.claude, args.codex), ccusage(
                args.ccusage, args.claude, args.codex)
        else:
            peer = ccusage(args.ccusage, args.claude, args.codex)
            runs = ours(args.new, args.claude, args.codex)
        walls["ccusage"].append(peer)
        for phase, wall in runs:
            ratios[phase].append(wall / peer)
            walls[phase].append(wall)
    print("| ours / ccusage daily | pairs | ratio median (Q1-Q3) | walls ours / ccusage |")
    print("|---|---:|---|---|")
    for phase, rs in ratios.items():
        q1, med, q3 = statistics.quantiles(rs, n=4, method="inclusive")
        print(f"| {phase} | {len(rs)} | {med:.3f} ({q1:.3f}-{q3:.3f}) | "
              f"{statistics.median(walls[phase]):.2f} s / "
              f"{statistics.median(walls['ccusage']):.2f} s |")


if __name__ == "__main__":
    main()
