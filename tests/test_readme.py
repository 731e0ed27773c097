"""The README's first screen is a person's; its test command is what CI runs."""

from __future__ import annotations

import re

from tests.support.paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def code_blocks(text: str) -> list[str]:
    """The fenced ``sh`` blocks of a Markdown text, in order."""
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def test_first_block_installs_and_starts_without_a_venv_by_hand() -> None:
    """The first block installs with pipx (Debian/Ubuntu's apt, macOS's Homebrew) and serves."""
    first = code_blocks(README)[0]
    lines = [line for line in first.splitlines() if line.strip()]
    assert any("apt-get install -y pipx" in line and "serve --demo" in line for line in lines)
    assert any("brew install pipx" in line and "serve --demo" in line for line in lines)
    assert "pip install ." not in first.replace("pipx install .", "")
    assert "pytest" not in first and "venv" not in first


def test_first_screen_sends_people_to_the_page() -> None:
    """The first screen names the page's address and no developer set-up."""
    screen = "\n".join(README.splitlines()[:30])
    assert "http://127.0.0.1:9477/" in screen
    assert "/metrics" not in screen.split("http://127.0.0.1:9477/")[0]
    for developer in ("pytest", ".ci/install", "chromium", "root"):
        assert developer not in screen, developer


def test_readme_test_command_is_what_ci_runs() -> None:
    """The README's test command is the one .ci/run runs, word for word."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci == "bash .ci/install && python3 -m pytest"
    assert any(line.split("#")[0].strip() == ci
               for block in code_blocks(README) for line in block.splitlines())
