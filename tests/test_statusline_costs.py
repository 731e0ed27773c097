"""The status line's session and today's cost, shown without a daemon (issue 35, item 7).

The session's cost is Claude Code's own ``cost.total_cost_usd``; today's is the
status line's book of those session costs since local midnight, or the
exporter's published figure when that is larger.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from exporter.cli import statusline, statusline_costs
from exporter.ingest import spool
from tests.support.statusline import line_of, payload, run

NOW = 1_790_000_000.0
MIDNIGHT = spool.local_midnight(NOW)


def line(state: Path, *, session: str = "s-1", cost: float = 1.2345, at: float = NOW) -> str:
    """The line printed for one refresh of ``session`` at ``at`` (in-process, clock injected)."""
    out = io.BytesIO()
    doc = payload(now=at, session=session, cost=cost)
    rc = statusline.main([], io.BytesIO(json.dumps(doc).encode()), out,
                         {spool.STATE_DIR_ENV: str(state)}, clock=lambda: at)
    assert rc == 0
    return out.getvalue().decode().rstrip("\n")


def tail(text: str) -> str:
    """The cost segments at the end of a line."""
    return " · ".join(part for part in text.split(" · ") if "$" in part)


def test_session_and_today_cost_shown_without_a_daemon(tmp_path: Path) -> None:
    """A real process, no serve, empty state dir: the session's cost and today's are shown."""
    text = line_of(run(json.dumps(payload(cost=3.214)).encode(), state=tmp_path))
    assert text.endswith(" · session $3.21 · today $3.21"), text


def test_today_sums_every_session_seen_today(tmp_path: Path) -> None:
    """Two sessions add up; a session's later refresh replaces its earlier figure."""
    assert tail(line(tmp_path, session="a", cost=2.0)) == "session $2.00 · today $2.00"
    assert tail(line(tmp_path, session="b", cost=3.0, at=NOW + 5)) == "session $3.00 · today $5.00"
    assert tail(line(tmp_path, session="a", cost=2.5, at=NOW + 9)) == "session $2.50 · today $5.50"


def test_a_session_crossing_midnight_counts_only_what_it_spent_today(tmp_path: Path) -> None:
    """Spent before midnight is yesterday's: today counts from the last figure seen before it."""
    line(tmp_path, session="a", cost=4.0, at=MIDNIGHT - 3600)
    assert tail(line(tmp_path, session="a", cost=5.0, at=MIDNIGHT + 3600)) == (
        "session $5.00 · today $1.00")


def test_a_restarted_session_keeps_what_it_spent_and_a_late_refresh_changes_nothing(
    tmp_path: Path,
) -> None:
    """A figure far below the last is a new Claude Code process; slightly below, a late refresh."""
    line(tmp_path, session="a", cost=4.0)
    assert tail(line(tmp_path, session="a", cost=3.9, at=NOW + 1)).endswith("today $4.00")
    assert tail(line(tmp_path, session="a", cost=0.5, at=NOW + 2)).endswith("today $4.50")
    assert tail(line(tmp_path, session="a", cost=1.5, at=NOW + 3)).endswith("today $5.50")


def test_the_exporters_figure_wins_when_larger(tmp_path: Path) -> None:
    """Serve's list-price total covers requests no status line saw (``claude -p``)."""
    spool.write_today(str(tmp_path), MIDNIGHT, 12.3456, NOW)
    assert tail(line(tmp_path, cost=1.0)) == "session $1.00 · today $12.35"
    spool.write_today(str(tmp_path), MIDNIGHT, 0.5, NOW)
    assert tail(line(tmp_path, cost=1.0, at=NOW + 1)) == "session $1.00 · today $1.00"


def test_hostile_session_ids_stay_inside_the_book(tmp_path: Path) -> None:
    """A session id with slashes or dots names no path outside the state dir's book."""
    state = tmp_path / "state"
    for n, session in enumerate(("../../escape", "..", "a/b", "x" * 500, "é\u0000")):
        assert tail(line(state, session=session, cost=1.0, at=NOW + n)).startswith("session $1.00")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]
    day = state / statusline_costs.BOOK_DIR / str(int(MIDNIGHT))
    assert len(list(day.iterdir())) == 5
    assert all(len(p.name) <= 140 for p in day.iterdir())


def test_damaged_book_entries_are_skipped(tmp_path: Path) -> None:
    """An entry that is not ours (garbage, a directory, a FIFO) is left out of today's sum."""
    line(tmp_path, session="a", cost=2.0)
    day = tmp_path / statusline_costs.BOOK_DIR / str(int(MIDNIGHT))
    (day / "garbage.json").write_bytes(b"\xff{not json")
    (day / "negative.json").write_text('{"base":0,"last":-5,"carried":0}')
    (day / "dir.json").mkdir()
    os.mkfifo(day / "fifo.json")
    assert tail(line(tmp_path, session="b", cost=1.0, at=NOW + 1)).endswith("today $3.00")


def test_old_days_are_pruned(tmp_path: Path) -> None:
    """The book keeps KEEP_DAYS days: older day directories go, one per refresh."""
    for days in (40, 50):
        line(tmp_path, session="old", cost=1.0, at=NOW - days * 86_400)
    book = tmp_path / statusline_costs.BOOK_DIR
    assert len(list(book.iterdir())) == 2
    line(tmp_path, cost=1.0)
    line(tmp_path, cost=1.0, at=NOW + 1)
    assert [p.name for p in book.iterdir()] == [str(int(MIDNIGHT))]
