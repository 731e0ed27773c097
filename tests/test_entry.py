"""The console script's entry point: what it freezes for the collector, what it imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import assistant, jsonl

ROOT = Path(__file__).resolve().parents[1]

# Run as the console script does (exporter.cli.entry.main() with sys.argv); an atexit handler,
# run as the process exits, tells where pydantic's settings model is: a class the collector
# tracks, or frozen (absent from gc.get_objects).
_SCRIPT = """
import atexit, gc, sys
def where():
    model = sys.modules.get("exporter.cli.config")
    if model is None:
        print("cli-not-imported", file=sys.stderr)
    else:
        tracked = any(o is model.Settings for o in gc.get_objects())
        print("tracked" if tracked else "frozen", file=sys.stderr)
atexit.register(where)
sys.argv = ["claude-code-exporter", *sys.argv[1:]]
from exporter.cli.entry import main
main()
"""


def _run(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> str:
    """Run the console script's entry with ``args``; what the atexit handler said."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, *args], input=stdin,
                          capture_output=True, env=environ, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stderr.decode().strip().splitlines()[-1]


def test_console_script_freezes_the_cli_modules(tmp_path: Path) -> None:
    """A report through the console script runs with pydantic's model frozen, not tracked."""
    session = tmp_path / "tree" / "projects" / "p" / "s.jsonl"
    session.parent.mkdir(parents=True)
    session.write_bytes(jsonl(assistant()))
    said = _run("report", "--json", "--data-dir", str(tmp_path / "tree"), "--state-dir",
                str(tmp_path / "state"))
    assert said == "frozen"


def test_console_script_statusline_imports_no_cli(tmp_path: Path) -> None:
    """The status line through the console script still skips the CLI's imports."""
    said = _run("statusline", stdin=b"{}",
                env={"CLAUDE_CODE_EXPORTER_STATE_DIR": str(tmp_path)})
    assert said == "cli-not-imported"
