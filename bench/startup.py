"""Start-up of the command: import time and wall time of one command, two source trees compared.

Usage: python3 -m bench.startup --baseline DIR [--runs 7] -- report --json --data-dir X ...

Runs the command from this tree and from ``--baseline`` (another checkout, e.g.
``git archive main | tar -x -C DIR``) in alternating runs, each with its own
bytecode cache (``PYTHONPYCACHEPREFIX``, warmed by one run first: an installed
package has its bytecode) and price-table cache, and prints per tree the median wall time of the
whole command and the median cumulative import time of ``exporter.cli``
(``-X importtime``). The machine is shared: read the two as a ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300.0  # one command; far above any start-up


def _env(tree: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # Each tree its own price-table cache too: it is keyed by the pricing module's
    # file, so two trees sharing one would rebuild it (0.2 s) on every other run.
    return {**env, "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(cache / "pyc"),
            "XDG_CACHE_HOME": str(cache / "xdg")}


def _cpu() -> float:
    """User + system seconds of every finished child so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(tree: Path, cache: Path, argv: list[str],
         importtime: bool) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, exporter.cli's cumulative import seconds or 0)."""
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "exporter",
           *argv]
    started, cpu = time.perf_counter(), _cpu()
    # cwd=tree: ``-m`` puts the working directory first on sys.path, before PYTHONPATH.
    proc = subprocess.run(cmd, env=_env(tree, cache), cwd=tree, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    wall, cpu = time.perf_counter() - started, _cpu() - cpu
    cli = [line for line in proc.stderr.splitlines() if line.endswith("| exporter.cli")]
    return wall, cpu, (int(cli[-1].split("|")[1]) / 1e6 if cli else 0.0)


def main() -> int:
    """Measure and print one line per tree."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = [a for a in args.argv if a != "--"]
    trees = {"this tree": ROOT, "baseline": args.baseline.resolve()}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        caches = {name: Path(tmp) / name.replace(" ", "-") for name in trees}
        walls: dict[str, list[float]] = {name: [] for name in trees}
        cpus: dict[str, list[float]] = {name: [] for name in trees}
        imports: dict[str, list[float]] = {name: [] for name in trees}
        for name, tree in trees.items():
            _run(tree, caches[name], argv, False)  # writes the bytecode cache
        for _ in range(args.runs):
            for name, tree in trees.items():
                wall, cpu, _ = _run(tree, caches[name], argv, False)
                walls[name].append(wall)
                cpus[name].append(cpu)
                imports[name].append(_run(tree, caches[name], argv, True)[2])
    for name in trees:
        print(f"{name}: wall {statistics.median(walls[name]):.3f} s, CPU "
              f"{statistics.median(cpus[name]):.3f} s, exporter.cli imports "
              f"{statistics.median(imports[name]) * 1000:.0f} ms (median of {args.runs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
