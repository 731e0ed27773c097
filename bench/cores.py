"""How many cores a command keeps busy, moment by moment: where its wall time is serial.

Usage: python3 -m bench.cores [--step 0.05] [--env NAME=VALUE ...] -- COMMAND [ARGS...]

Runs the command once and samples the machine's CPU counters (/proc/stat)
every ``--step`` seconds while it runs, then prints the busy cores of each
step (the whole machine's: run it on a quiet one) and, for this project's
2-core machines, how much of the wall time passed with about one core busy,
about two, or in between. A cold
``report`` on a 2-core machine shows its start-up on one core, the parse
phase on both, and the ledger's end on one to two (docs/benchmarks-history.md).
Linux only; the command's output is discarded.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

_STAT = Path("/proc/stat")


def _counters() -> tuple[int, int]:
    """(all jiffies, idle jiffies) of the machine so far."""
    fields = [int(v) for v in _STAT.read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]  # idle + iowait


def profile(cmd: list[str], env: dict[str, str], step: float) -> tuple[float, list[float]]:
    """Run ``cmd``; its wall time and the busy cores of each ``step`` while it ran."""
    cores = os.cpu_count() or 1
    busy: list[float] = []
    start = time.perf_counter()
    last = _counters()
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env={**os.environ, **env}) as proc:
        while proc.poll() is None:
            time.sleep(step)  # sampling, not synchronisation: the loop ends with the process
            now = _counters()
            total, idle = now[0] - last[0], now[1] - last[1]
            busy.append(cores * (total - idle) / total if total else 0.0)
            last = now
    return time.perf_counter() - start, busy


def main() -> None:
    """Parse the command line, profile the command, print the profile."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--step", type=float, default=0.05, help="seconds between samples")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given")
    env = dict(item.split("=", 1) for item in args.env)
    wall, busy = profile(cmd, env, args.step)
    print(f"wall {wall:.2f} s, {len(busy)} samples of {args.step:g} s")
    print(" ".join(f"{b:.1f}" for b in busy))
    one = sum(1 for b in busy if b < 1.3) * args.step
    two = sum(1 for b in busy if b >= 1.7) * args.step
    between = (len(busy) * args.step) - one - two
    print(f"about one core busy: {one:.2f} s; about two: {two:.2f} s; "
          f"between: {max(between, 0.0):.2f} s")


if __name__ == "__main__":
    main()
