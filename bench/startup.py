"""Start-up of the command: import time and wall time of one command, two source trees compared.

Usage: python3 -m bench.startup --baseline DIR [--runs 7] [--cold] [--no-price-cache]
       [--no-importtime] [--no-bytecode] -- report --json --data-dir X --state-dir {state} ...

Runs the command from this tree and from ``--baseline`` (another checkout, e.g.
``git archive main | tar -x -C DIR``) in pairs, the order flipping from pair to
pair, each tree with its own bytecode cache (``PYTHONPYCACHEPREFIX``, warmed by
one run first: an installed package has its bytecode) and price-table cache. It
prints per tree the median wall time of the whole command and the median
cumulative import time of ``exporter.cli.commands`` (``-X importtime``), then the
median (and quartiles) of this tree's wall time over the baseline's within each
pair. The machine is shared: read the ratio.

``--cold`` gives every run a new, empty state directory in place of ``{state}``
in the command (a cold ``report``: an empty ledger); ``--no-price-cache`` an
empty price-table cache as well (a first run after installing).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300.0  # one command; far above any start-up
STATE = "{state}"  # replaced by a fresh state directory per run with --cold


def _env(tree: Path, cache: Path, bytecode: bool = True) -> dict[str, str]:
    if not bytecode:  # as this machine's shells run: every run compiles the tree's modules
        return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tree),
                "XDG_CACHE_HOME": str(cache / "xdg")}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # Each tree its own price-table cache too: before 0.1 one file held one key (the
    # pricing module's mtime), so two trees sharing it rebuilt it on every other run;
    # and --no-price-cache must not empty the other tree's.
    return {**env, "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(cache / "pyc"),
            "XDG_CACHE_HOME": str(cache / "xdg")}


def _cpu() -> float:
    """User + system seconds of every finished child so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(tree: Path, cache: Path, argv: list[str],
         importtime: bool, bytecode: bool = True) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, exporter.cli.commands's cumulative import seconds or 0)."""
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "exporter",
           *argv]
    started, cpu = time.perf_counter(), _cpu()
    # cwd=tree: ``-m`` puts the working directory first on sys.path, before PYTHONPATH.
    proc = subprocess.run(cmd, env=_env(tree, cache, bytecode), cwd=tree, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    wall, cpu = time.perf_counter() - started, _cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    cli = [line for line in proc.stderr.splitlines() if line.endswith("| exporter.cli.commands")]
    return wall, cpu, (int(cli[-1].split("|")[1]) / 1e6 if cli else 0.0)


def _fresh(argv: list[str], cache: Path, cold: bool, no_price_cache: bool) -> list[str]:
    """The command for one run: a new empty state dir and/or price cache when asked."""
    if no_price_cache:
        shutil.rmtree(cache / "xdg", ignore_errors=True)
    if not cold:
        return argv
    state = cache / "state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    return [str(state) if a == STATE else a for a in argv]


def main() -> int:
    """Measure and print one line per tree."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--cold", action="store_true",
                    help=f"a new empty state directory per run, in place of {STATE}")
    ap.add_argument("--no-price-cache", action="store_true",
                    help="an empty price-table cache per run (a first run after installing)")
    ap.add_argument("--no-importtime", action="store_true",
                    help="skip the extra -X importtime run after each timed run")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="PYTHONDONTWRITEBYTECODE=1 and no bytecode cache for the trees (what "
                         "this machine's shells do; an installed package has its bytecode)")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = [a for a in args.argv if a != "--"]
    if args.cold and STATE not in argv:
        ap.error(f"--cold needs {STATE} in the command (e.g. --state-dir {STATE})")
    trees = {"this tree": ROOT, "baseline": args.baseline.resolve()}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        caches = {name: Path(tmp) / name.replace(" ", "-") for name in trees}
        walls: dict[str, list[float]] = {name: [] for name in trees}
        cpus: dict[str, list[float]] = {name: [] for name in trees}
        imports: dict[str, list[float]] = {name: [] for name in trees}
        for name, tree in trees.items():  # writes the bytecode cache
            _run(tree, caches[name], _fresh(argv, caches[name], args.cold, False), False)
        order = list(trees.items())
        for pair in range(args.runs):
            for name, tree in order[::-1] if pair % 2 else order:
                run = _fresh(argv, caches[name], args.cold, args.no_price_cache)
                wall, cpu, _ = _run(tree, caches[name], run, False, not args.no_bytecode)
                walls[name].append(wall)
                cpus[name].append(cpu)
                if not args.no_importtime:
                    run = _fresh(argv, caches[name], args.cold, args.no_price_cache)
                    imports[name].append(
                        _run(tree, caches[name], run, True, not args.no_bytecode)[2])
    for name in trees:
        line = (f"{name}: wall {statistics.median(walls[name]):.3f} s, CPU "
                f"{statistics.median(cpus[name]):.3f} s")
        if imports[name]:
            line += (f", exporter.cli.commands imports "
                     f"{statistics.median(imports[name]) * 1000:.0f} ms")
        print(f"{line} (median of {args.runs}; walls "
              f"{', '.join(f'{w:.2f}' for w in walls[name])})")
    ratios = [a / b for a, b in zip(walls["this tree"], walls["baseline"], strict=True)]
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    print(f"this tree / baseline, per pair: wall {statistics.median(ratios):.3f} "
          f"({quartiles[0]:.3f}-{quartiles[2]:.3f}), CPU of the medians "
          f"{statistics.median(cpus['this tree']) / statistics.median(cpus['baseline']):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
