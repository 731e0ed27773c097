"""A parser process keeps the memory it frees, so reading files faults fewer pages in."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Reads every transcript of a tree as a parser does, in two fresh child processes (one
# as glibc is by default, one set up as a pool's parser is), and prints the page faults
# each took: a count of the kernel's, not a timing.
_FAULTS = """
import ctypes, glob, os, resource, sys
from exporter.ingest import scan, workers
paths = sorted(glob.glob(sys.argv[1] + "/**/*.jsonl", recursive=True))
def faults(keep):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if keep:
            workers._keep_freed_memory(ctypes.CDLL(None))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        scan.read_files([(p, None) for p in paths], 4e9)
        os.write(w, str(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    return int(os.read(r, 64))
print(faults(False), faults(True))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's parameters are glibc's")
def test_parser_reuses_freed_memory(real_tree: Path) -> None:
    """Reading the real transcripts faults at least a tenth fewer pages than by default."""
    proc = subprocess.run([sys.executable, "-c", _FAULTS, str(real_tree)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
                          check=True)
    default, kept = (int(n) for n in proc.stdout.split())
    assert kept < 0.9 * default, (default, kept)
