"""Cold and warm `report` over a generated month (~300 MB), against simple baselines.

Usage: python3 -m bench.cold_scan [--mb 300] [--repeat 3] [--ccusage PATH] [--command PATH]
Prints a Markdown table for docs/benchmarks.md. ``--command`` runs the
exporter as a user installed it (a virtual environment's
``claude-code-exporter`` after ``pip install .``) instead of this checkout
through ``python -m exporter``, whose editable install and this
interpreter's site hooks add ~35 ms to every run. With ``--ccusage`` (ccusage
20's native build: ``npm install ccusage@20.0.24``), the cold report and
``ccusage claude daily --json --offline`` run in alternation, ``--repeat``
times each, and a second table gives every run and the ratio of the medians
(the machine is shared: a ratio of alternating runs, not an absolute time).
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


def _cold(tree: Path, command: str | None) -> tuple[Run, Run]:
    """One cold report into an empty state directory, then a warm one (nothing new)."""
    state = Path(tempfile.mkdtemp(prefix="bench-state-"))
    try:
        words = ("report", "--json", "--data-dir", str(tree), "--state-dir", str(state))
        report = [command, *words] if command else exporter_cmd(*words)
        return measure(report), measure(report)
    finally:
        shutil.rmtree(state)


def main() -> None:
    """Generate (once) and measure."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ccusage", help="path to a ccusage executable to compare with")
    ap.add_argument("--command", help="the exporter's installed command (default: this checkout)")
    args = ap.parse_args()
    tree = month_tree(args.mb)
    size, files = tree_size(tree)
    truth = json.loads((tree / "truth.json").read_text())
    cold, warm, peer = [], [], []
    for _ in range(args.repeat):  # alternating: ours, then the peer, in the same minute
        c, w = _cold(tree, args.command)
        cold.append(c)
        warm.append(w)
        if args.ccusage:
            peer.append(measure([args.ccusage, "claude", "daily", "--json", "--offline"],
                                {"CLAUDE_CONFIG_DIR": str(tree)}))
    rows: list[tuple[str, Run]] = [
        ("claude-code-exporter report, cold (empty ledger)", _median(cold)),
        ("claude-code-exporter report, warm (nothing new)", _median(warm)),
    ]
    jsonl = [str(p) for p in sorted(tree.rglob("*.jsonl"))]
    grep = ["sh", "-c", 'cat "$@" | grep -c \'"usage"\'', "sh", *jsonl]
    rows.append(("cat | grep -c '\"usage\"' (reads every byte, parses nothing)",
                 _median([measure(grep) for _ in range(args.repeat)])))
    if peer:
        rows.append((f"{Path(args.ccusage).name} claude daily --json --offline", _median(peer)))
    print(f"Machine: {machine()}")
    print(f"Tree: {size / 1e6:.0f} MB in {files} files, "
          f"{truth['totals']['requests']} requests (seed 42), median of {args.repeat}\n")
    print("| command | wall s | CPU s | peak RSS MB |\n|---|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r.wall:.2f} | {r.cpu:.2f} | {r.rss_mb:.0f} |")
    if peer:
        print("\n| run | claude-code-exporter (cold) | ccusage native |\n|---|---:|---:|")
        for i, (ours, theirs) in enumerate(zip(cold, peer, strict=True), 1):
            print(f"| {i} | {ours.wall:.2f} s, CPU {ours.cpu:.2f} s | "
                  f"{theirs.wall:.2f} s, CPU {theirs.cpu:.2f} s |")
        ratio = _median(cold).wall / _median(peer).wall
        print(f"\nMedian wall time: ours / ccusage = {ratio:.2f}")


if __name__ == "__main__":
    main()
