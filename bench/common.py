"""Shared pieces of the benchmarks: the generated month, process measurements."""

from __future__ import annotations

import os
import platform
import resource
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
    """Run a command to completion and measure it (children's rusage)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, **(env or {})})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of children is the largest child so far: runs go smallest-first or alone.
    return Run(wall, cpu, after.ru_maxrss / 1024)


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
