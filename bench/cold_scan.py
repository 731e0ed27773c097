"""Cold and warm `report` over a generated month (~300 MB), against simple baselines.

Usage: python3 -m bench.cold_scan [--mb 300] [--repeat 3] [--ccusage PATH]
Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.common import Run, exporter_cmd, machine, measure, month_tree, tree_size


def _median(runs: list[Run]) -> Run:
    return Run(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs),
               max(r.rss_mb for r in runs))


def main() -> None:
    """Generate (once) and measure."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ccusage", help="path to a ccusage executable to compare with")
    args = ap.parse_args()
    tree = month_tree(args.mb)
    size, files = tree_size(tree)
    truth = json.loads((tree / "truth.json").read_text())
    rows: list[tuple[str, Run]] = []
    cold, warm = [], []
    for _ in range(args.repeat):
        state = Path(tempfile.mkdtemp(prefix="bench-state-"))
        report = exporter_cmd("report", "--json", "--data-dir", str(tree), "--state-dir",
                              str(state))
        cold.append(measure(report))
        warm.append(measure(report))
        shutil.rmtree(state)
    rows += [("claude-code-exporter report, cold (empty ledger)", _median(cold)),
             ("claude-code-exporter report, warm (nothing new)", _median(warm))]
    jsonl = [str(p) for p in sorted(tree.rglob("*.jsonl"))]
    grep = ["sh", "-c", 'cat "$@" | grep -c \'"usage"\'', "sh", *jsonl]
    rows.append(("cat | grep -c '\"usage\"' (reads every byte, parses nothing)",
                 _median([measure(grep) for _ in range(args.repeat)])))
    if args.ccusage:
        cc = [args.ccusage, "daily", "--json", "--offline"]
        rows.append((f"{Path(args.ccusage).name} daily --json --offline",
                     _median([measure(cc, {"CLAUDE_CONFIG_DIR": str(tree)})
                              for _ in range(args.repeat)])))
    print(f"Machine: {machine()}")
    print(f"Tree: {size / 1e6:.0f} MB in {files} files, "
          f"{truth['totals']['requests']} requests (seed 42), median of {args.repeat}\n")
    print("| command | wall s | CPU s | peak RSS MB |\n|---|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r.wall:.2f} | {r.cpu:.2f} | {r.rss_mb:.0f} |")


if __name__ == "__main__":
    main()
