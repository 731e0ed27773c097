"""A mixed home for the agent tests: real Claude Code transcripts beside real Codex rollouts.

``report`` runs the command line as a process over either part or both, each
ledger in its own state dir; :func:`codex_count` counts the Codex fixture
independently of the parser (each distinct ``token_count`` ``info`` that
grew its file's cumulative total is one turn, as the fixture README's
"dedup" row counts them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from tests.support.codex_count import FIELDS, count_turns
from tests.support.paths import REAL, ROOT

CLAUDE = REAL  # real Claude Code transcripts (../shared/fixtures/real)
CODEX = ROOT / "tests" / "fixtures" / "codex_real"  # real Codex rollouts (its README)


def env(home: Path) -> dict[str, str]:
    """The test run's environment minus the user's homes: UTC, 120 columns, ``HOME`` ``home``."""
    out = {k: v for k, v in os.environ.items() if k not in ("CODEX_HOME", "CLAUDE_CONFIG_DIR")}
    return {**out, "HOME": str(home), "TZ": "UTC", "COLUMNS": "120", "NO_COLOR": "1"}


def report(state: Path, *flags: str, codex: bool = True, claude: bool = True) -> str:
    """`report` over the Claude part, the Codex part or both (one ledger per ``state``)."""
    dirs = [*(("--data-dir", str(CLAUDE)) if claude else ()),
            *(("--codex-home", str(CODEX)) if codex else ())]
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "report", *dirs, "--state-dir", str(state),
         "--timezone", "UTC", *flags],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
        env=env(state.parent))
    assert done.returncode == 0, done.stderr
    return done.stdout


def codex_count(home: Path = CODEX) -> dict[str, int]:
    """Turns and token sums of a Codex home, each distinct turn once (the README's dedup)."""
    counted = count_turns(home)
    return {"turns": counted["turns"], **{field: counted[field] for field in FIELDS}}


class _AgentLinks(HTMLParser):
    """The page's agent filter links: ``data-agent`` → href (and which one is current)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, str] = {}
        self.current: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Note an agent link as it opens."""
        a = dict(attrs)
        if tag == "a" and a.get("data-agent"):
            self.links[str(a["data-agent"])] = str(a.get("href"))
            if a.get("aria-current"):
                self.current = str(a["data-agent"])


def agent_links(html: str) -> tuple[dict[str, str], str | None]:
    """The agent filter links of a page (``all``, ``claude``, ``codex`` → href), and the current."""
    found = _AgentLinks()
    found.feed(html)
    return found.links, found.current
