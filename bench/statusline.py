"""Latency of the status-line command as Claude Code starts it: a fresh interpreter per refresh.

Usage: python3 -m bench.statusline [--runs 200] [--python PATH] [--ledger-mb 40]

By default the exporter package is copied into a temporary directory and
byte-compiled (as ``pip install`` does), and run by a fresh virtual
environment's interpreter (as a pipx install does), so the figure does not
include this checkout's editable-install hooks or missing .pyc files. Each
command runs ``--runs`` times, the commands alternating run by run (the
machine is shared: a burst of load hits all of them alike). Wall time
includes interpreter start; the baseline row is ``python -c pass``.

The state dir is a month old, as a user's is with no ``serve`` running: a
ledger of a generated month (``--ledger-mb``, scanned by ``report``), a month
of samples never ingested in the spool, the status line's book of session
costs for 35 days (30 sessions a day) and 40 sessions today, and a today's
file from an earlier ``serve``; every line printed shows the session's and
today's cost (checked). Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import venv
from pathlib import Path

from bench.common import exporter_cmd, machine

ROOT = Path(__file__).resolve().parent.parent

CONSOLE = "import sys; from exporter.cli.entry import main; sys.exit(main())"


def payload(now: float) -> bytes:
    """A realistic status-line payload (Claude Code 2.1 shape, a Max subscriber)."""
    doc = {
        "hook_event_name": "Status",
        "session_id": "6f1c0c4e-8a8b-4b7e-9d55-0a3e6f0a1b2c",
        "transcript_path": "/home/dev/.claude/projects/-home-dev-app/6f1c0c4e.jsonl",
        "cwd": "/home/dev/app",
        "model": {"id": "claude-opus-4-6", "display_name": "Opus 4.6"},
        "workspace": {"current_dir": "/home/dev/app", "project_dir": "/home/dev/app"},
        "version": "2.1.90",
        "output_style": {"name": "default"},
        "cost": {"total_cost_usd": 3.21, "total_duration_ms": 845000,
                 "total_api_duration_ms": 230000, "total_lines_added": 156,
                 "total_lines_removed": 23},
        "context_window": {"total_input_tokens": 85234, "total_output_tokens": 14521,
                           "context_window_size": 200000, "used_percentage": 42,
                           "remaining_percentage": 58,
                           "current_usage": {"input_tokens": 8500, "output_tokens": 1200,
                                             "cache_creation_input_tokens": 5000,
                                             "cache_read_input_tokens": 70000}},
        "exceeds_200k_tokens": False,
        "rate_limits": {"five_hour": {"used_percentage": 35, "resets_at": int(now) + 9000},
                        "seven_day": {"used_percentage": 17, "resets_at": int(now) + 300000}},
    }
    return json.dumps(doc).encode()


def install(work: Path) -> tuple[str, str]:
    """A byte-compiled copy of the package and a clean venv: (python, PYTHONPATH)."""
    site = work / "site"
    shutil.copytree(ROOT / "exporter", site / "exporter",
                    ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(site, quiet=1)
    venv.EnvBuilder(with_pip=False).create(work / "venv")
    return str(work / "venv" / "bin" / "python"), str(site)


def measure(commands: dict[str, list[str]], stdin: bytes, env: dict[str, str],
            runs: int) -> dict[str, list[float]]:
    """Wall milliseconds of each command, alternating commands run by run."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            start = time.perf_counter()
            proc = subprocess.run(cmd, input=stdin, capture_output=True, env=env, check=False)
            times[name].append((time.perf_counter() - start) * 1000)
            if proc.returncode != 0 or (cmd[-1] != "pass" and not proc.stdout.strip()):
                raise RuntimeError(f"{name}: exit {proc.returncode} {proc.stderr!r}")
            if "statusline" in cmd and "--then" not in cmd and b"today $" not in proc.stdout:
                raise RuntimeError(f"{name}: no costs shown: {proc.stdout!r}")
    return times


def p95(values: list[float]) -> float:
    """95th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def month_old_state(work: Path, state: Path, now: float, ledger_mb: int) -> str:
    """A state dir as a month of use leaves it without serve; returns what it holds."""
    from datetime import UTC, datetime

    from exporter.cli import statusline_costs
    from exporter.ingest import spool
    from exporter.synth import GenOptions, generate

    tree = work / "claude"
    start = datetime.fromtimestamp(now - 30 * 86_400, tz=UTC)
    generate(tree, GenOptions(seed=7, sessions=20, start=start, malformed=False,
                              target_bytes=ledger_mb * 1_000_000))
    subprocess.run([*exporter_cmd("report", "--data-dir", str(tree), "--state-dir", str(state),
                                  "--json")], check=True, capture_output=True)
    sample = spool.encode(spool.sample_record(json.loads(payload(now)), now))
    per_day = 3000  # a busy day's refreshes
    with open(state / spool.SPOOL_NAME, "ab") as f:
        for _ in range(30):
            f.write(sample * per_day)
    for day in range(35, -1, -1):
        for n in range(40 if day == 0 else 30):
            at = now - day * 86_400 - 3600 + n
            for cost in (0.5, 1.5, 2.5):
                statusline_costs.record(str(state), f"session-{day}-{n}", cost, at)
    spool.write_today(str(state), spool.local_midnight(now), 12.34, now)
    ledger_mb_real = (state / "ledger.sqlite3").stat().st_size / 1e6
    spool_mb = (state / spool.SPOOL_NAME).stat().st_size / 1e6
    return (f"ledger {ledger_mb_real:.0f} MB (a generated month), spool {spool_mb:.0f} MB "
            f"never ingested, book of 36 days")


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--python", help="interpreter to use (default: a fresh venv)")
    parser.add_argument("--ledger-mb", type=int, default=40,
                        help="transcript MB of the generated month in the ledger")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-statusline-") as tmp:
        work = Path(tmp)
        if args.python:
            python, path = args.python, str(ROOT)
        else:
            python, path = install(work)
        state = work / "state"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work),
               "PYTHONPATH": path, "CLAUDE_CODE_EXPORTER_STATE_DIR": str(state)}
        now = time.time()
        from exporter.ingest import spool

        held = month_old_state(work, state, now, args.ledger_mb)
        commands = {
            "python -c pass (interpreter start, baseline)": [python, "-c", "pass"],
            "claude-code-exporter statusline (console-script path)":
                [python, "-c", CONSOLE, "statusline"],
            "python -m exporter.cli.statusline": [python, "-m", "exporter.cli.statusline"],
            "statusline --then 'cat >/dev/null; echo mine'":
                [python, "-c", CONSOLE, "statusline", "--then", "cat >/dev/null; echo mine"],
        }
        times = measure(commands, payload(now), env, args.runs)
        lines = (state / spool.SPOOL_NAME).read_bytes().count(b"\n") - 30 * 3000
    load = os.getloadavg()[0]
    print(f"Machine: {machine()}; load average {load:.1f}; {args.runs} runs each, alternating; "
          f"interpreter: {'given' if args.python else 'fresh venv, byte-compiled copy'}; "
          f"{lines} samples spooled; state: {held}.\n")
    # Runs alternate, so run i of every command saw about the same load: the
    # median of the per-run differences is the command's own cost.
    base = next(iter(times.values()))
    print("| command | p50 ms | p95 ms | p50 of (run − baseline run) ms |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        extra = statistics.median(v - b for v, b in zip(values, base, strict=True))
        print(f"| {name} | {statistics.median(values):.1f} | {p95(values):.1f} | {extra:+.1f} |")


if __name__ == "__main__":
    main()
