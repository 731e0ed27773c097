"""``serve --demo``'s Codex home: a few generated Codex CLI threads of the last two days.

The demo shows both agents the exporter reads, so a newcomer sees the page's
"By agent" card and Codex's families on /metrics without a Codex install. The
home is :func:`exporter.synth.codex.generate_home`'s (snapshot, archived and
fork copies included, so the demo counts each turn once as a real home needs),
written beside the Claude Code tree at ``root/codex``.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import msgspec

from exporter.synth.codex import CodexOptions, generate_home

HOME_NAME: Final = "codex"
SESSIONS: Final = 4
#: Threads start this long before now, so most of them fall on the last day; a home
#: of four threads (forks and resumes included) spans up to about 40 hours, and turns
#: dated after now would wait as ahead of the clock (see codex_history).
START_HOURS: Final = 30


def codex_history(root: Path, now: float, seed: int = 0) -> tuple[Path, dict[str, Any]]:
    """Write a small Codex home at ``root/codex`` ending before ``now``; (its path, its truth).

    Should the threads of that seed number run past ``now``, the home is written again that much
    earlier (its shape does not depend on the start), so no turn is from the future.
    """
    home = root / HOME_NAME
    start = datetime.fromtimestamp(now, UTC).replace(microsecond=0) - timedelta(hours=START_HOURS)
    options = CodexOptions(seed=seed, sessions=SESSIONS, turns_per_session=8, start=start)
    truth = generate_home(home, options)
    overshoot = latest(home) - now
    if overshoot > 0:  # once: the same threads, moved earlier by the overshoot
        shutil.rmtree(home)
        options = CodexOptions(seed=seed, sessions=SESSIONS, turns_per_session=8,
                               start=start - timedelta(seconds=overshoot + 1))
        truth = generate_home(home, options)
    return home, truth


def latest(home: Path) -> float:
    """The latest ``timestamp`` (Unix seconds) of any complete line of the home's rollouts."""
    found = 0.0
    decode = msgspec.json.Decoder(dict[str, Any]).decode
    for path in home.rglob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            try:
                stamp = decode(line).get("timestamp")
            except msgspec.DecodeError:  # a snapshot's cut last line
                continue
            if isinstance(stamp, str):
                found = max(found, datetime.fromisoformat(stamp).timestamp())
    return found
