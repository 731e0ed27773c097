"""Static checks run with the tests: ruff and mypy must be clean."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_is_clean() -> None:
    """Ruff finds nothing in the package, tests and benchmarks."""
    proc = _run(sys.executable, "-m", "ruff", "check", "exporter", "tests", "bench", "grafana")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_is_clean() -> None:
    """Mypy --strict (configured in pyproject.toml) finds nothing in the package, tests, bench."""
    proc = _run(sys.executable, "-m", "mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
