"""``claude-code-exporter statusline --install`` / ``--uninstall``: Claude Code's settings edited.

Real processes on a real settings file: every other key is kept, a backup is
made, a second run changes nothing, ``--dry-run`` writes nothing, and a file
that is not a JSON object is refused with nothing changed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import ROOT

OTHER_KEYS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git status)"], "deny": []},
    "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},
    "env": {"FOO": "bär"},
}


def console_script(tmp_path: Path) -> Path:
    """A ``claude-code-exporter`` console script as pip writes one into a venv's bin/."""
    script = tmp_path / "venv" / "bin" / "claude-code-exporter"
    script.parent.mkdir(parents=True)
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom exporter.cli.entry import main\n"
                      "sys.exit(main())\n")
    script.chmod(0o755)
    return script


def install(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``<venv>/bin/claude-code-exporter statusline ARGS`` with CLAUDE_CONFIG_DIR set."""
    script = tmp_path / "venv" / "bin" / "claude-code-exporter"
    if not script.exists():
        console_script(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"),
               CLAUDE_CONFIG_DIR=str(tmp_path / "claude"))
    return subprocess.run([str(script), "statusline", *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def settings(tmp_path: Path) -> Path:
    """The settings file Claude Code reads with CLAUDE_CONFIG_DIR set."""
    return tmp_path / "claude" / "settings.json"


def backups(tmp_path: Path) -> list[Path]:
    """The backups made beside the settings file."""
    return sorted(p for p in (tmp_path / "claude").iterdir() if ".bak" in p.name)


def test_install_keeps_every_other_key_makes_a_backup_and_is_idempotent(tmp_path: Path) -> None:
    """Other keys survive, the command is the script's absolute path, a second run is a no-op."""
    path = settings(tmp_path)
    path.parent.mkdir()
    original = json.dumps(OTHER_KEYS, indent=4, ensure_ascii=False)
    path.write_text(original)
    path.chmod(0o600)
    first = install(tmp_path, "--install")
    assert first.returncode == 0, first.stderr
    doc = json.loads(path.read_text())
    script = tmp_path / "venv" / "bin" / "claude-code-exporter"
    assert doc["statusLine"] == {"type": "command", "command": f"{script} statusline"}
    assert {k: v for k, v in doc.items() if k != "statusLine"} == OTHER_KEYS
    assert path.stat().st_mode & 0o777 == 0o600
    (backup,) = backups(tmp_path)
    assert backup.read_text() == original
    assert str(path) in first.stdout and str(backup) in first.stdout
    written = path.read_bytes()
    second = install(tmp_path, "--install")
    assert second.returncode == 0, second.stderr
    assert "already" in second.stdout
    assert path.read_bytes() == written
    assert len(backups(tmp_path)) == 1


def test_install_creates_missing_settings_and_uninstall_removes_only_its_entry(
    tmp_path: Path,
) -> None:
    """No settings file yet: one is made; --uninstall takes the entry out, twice is a no-op."""
    assert install(tmp_path, "--install").returncode == 0
    assert "statusLine" in json.loads(settings(tmp_path).read_text())
    doc = json.loads(settings(tmp_path).read_text())
    doc["model"] = "sonnet"
    settings(tmp_path).write_text(json.dumps(doc))
    out = install(tmp_path, "--uninstall")
    assert out.returncode == 0, out.stderr
    assert json.loads(settings(tmp_path).read_text()) == {"model": "sonnet"}
    state = tmp_path / "home" / ".local" / "state" / "claude-code-exporter"
    assert state.is_dir() and state.stat().st_mode & 0o777 == 0o700  # a bind mount's source
    again = install(tmp_path, "--uninstall")
    assert again.returncode == 0 and "not installed" in again.stdout


def test_install_wraps_the_users_own_status_line_and_uninstall_restores_it(
    tmp_path: Path,
) -> None:
    """A status line of the user's own keeps showing (through --then); --uninstall puts it back."""
    path = settings(tmp_path)
    path.parent.mkdir()
    own = {"type": "command", "command": "~/bin/my line.sh", "padding": 0}
    path.write_text(json.dumps({"statusLine": own}))
    assert install(tmp_path, "--install").returncode == 0
    command = json.loads(path.read_text())["statusLine"]["command"]
    assert command.endswith("statusline --then '~/bin/my line.sh'")
    assert json.loads(path.read_text())["statusLine"]["padding"] == 0
    assert "already" in install(tmp_path, "--install").stdout  # wrapped once, not twice
    assert install(tmp_path, "--uninstall").returncode == 0
    assert json.loads(path.read_text()) == {"statusLine": own}


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    """--dry-run prints the entry it would write and leaves the file and directory alone."""
    path = settings(tmp_path)
    path.parent.mkdir()
    path.write_text('{"model": "opus"}')
    out = install(tmp_path, "--install", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert '"statusLine"' in out.stdout and "statusline" in out.stdout
    assert path.read_text() == '{"model": "opus"}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]


@pytest.mark.parametrize("content", [b'{"model": "opus",', b"[1, 2]", b"\xff\xfe{}",
                                     b'{"statusLine": "bare string"}', b'{"a": 1, "a": 2}',
                                     b'{"budget": NaN}'])
def test_hostile_settings_are_refused_and_left_alone(tmp_path: Path, content: bytes) -> None:
    """Not a JSON object (or a statusLine we cannot read): exit 2, a clear message, no change."""
    path = settings(tmp_path)
    path.parent.mkdir()
    path.write_bytes(content)
    for flag in ("--install", "--uninstall"):
        out = install(tmp_path, flag)
        assert out.returncode == 2, (flag, out.stdout, out.stderr)
        assert str(path) in out.stderr and "nothing changed" in out.stderr
        assert path.read_bytes() == content
        assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]


def test_settings_through_a_symlink_stay_a_symlink(tmp_path: Path) -> None:
    """A dotfiles manager's link is written through, not replaced by a plain file."""
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text('{"model": "opus"}')
    settings(tmp_path).parent.mkdir()
    settings(tmp_path).symlink_to(real)
    assert install(tmp_path, "--install").returncode == 0
    assert settings(tmp_path).is_symlink()
    assert "statusLine" in json.loads(real.read_text())
