"""Static checks run with the tests: ruff, mypy and the import contract must be clean."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


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


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the package under ``root`` with the project's contract."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    # The console script's own entry point: importlinter.cli has no ``__main__`` guard.
    code = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=root,
                          capture_output=True, text=True, check=False, env=env)


def test_import_contract_is_kept() -> None:
    """No stage imports a later one: the import-linter contracts in pyproject.toml all hold."""
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_import_contract_catches_a_second_sqlite_driver(tmp_path: Path) -> None:
    """A copy of the package where a module imports Python's sqlite3 itself breaks the contract."""
    shutil.copytree(ROOT / "exporter", tmp_path / "exporter",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    slots = tmp_path / "exporter" / "ledger" / "slots.py"
    slots.write_text(slots.read_text() + "\nimport sqlite3 as _driver  # a second driver\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "one SQLite driver: every module takes it from exporter.sqlite BROKEN" in proc.stdout
