"""Shared pieces of the benchmarks: the generated month, process measurements."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.synth import GenOptions, generate

OUT = Path(__file__).resolve().parent / "out"


def month_tree(target_mb: int = 300, seed: int = 42) -> Path:
    """A generated ~300 MB month of heavy use, made once and reused."""
    root = OUT / f"month-{target_mb}mb-seed{seed}"
    if not (root / "truth.json").exists():
        generate(root, GenOptions(seed=seed, sessions=40, requests_per_session=1200,
                                  target_bytes=target_mb * 1_000_000))
    return root


@dataclass(frozen=True)
class Run:
    """Wall time, CPU time and peak RSS of one child process."""

    wall: float
    cpu: float
    rss_mb: float


def measure(cmd: list[str], env: dict[str, str] | None = None) -> Run:
    """Run a command to completion and measure it: wall time, and its own rusage.

    The rusage is the one ``wait4`` gives for this child (with the processes
    it waited for, such as a pool's parsers): its peak RSS is this run's, not
    the largest of every child so far (``RUSAGE_CHILDREN``).
    """
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def exporter_cmd(*args: str) -> list[str]:
    """The exporter's command line, run with this interpreter."""
    return [sys.executable, "-m", "exporter", *args]


def machine() -> str:
    """One line describing this machine."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def tree_size(root: Path) -> tuple[int, int]:
    """(bytes, files) of the transcripts under ``root``."""
    files = list(root.rglob("*.jsonl"))
    return sum(f.stat().st_size for f in files), len(files)
