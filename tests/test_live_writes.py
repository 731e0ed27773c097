"""A live append costs the disk a share of a commit, not a commit of its own (round 3, #12)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.ledger.schema import PAGE_SIZE
from exporter.ledger.wal import committed_frames
from tests.support.daemon import Driven

LINES = 40


@pytest.fixture
def driven(tmp_path: Path) -> Iterator[Driven]:
    """A started daemon over one transcript, closed at the end."""
    d = Driven(tmp_path)
    try:
        yield d
    finally:
        d.daemon.close()


@pytest.mark.parametrize("every", [0.25, 1.0], ids=["4/s", "1/s"])
def test_lines_appended_a_second_apart_or_closer_write_under_64_kib_each(
        driven: Driven, every: float) -> None:
    """40 lines at 4/s or 1/s, each woken and stepped: every line counted, < 64 KiB of WAL each."""
    ledger = driven.daemon.parts.ledger_path
    driven.step()  # the follower's first turn: its full pass
    written, last = 0, committed_frames(ledger)
    for i in range(LINES):
        driven.append(f"live{i}")
        driven.daemon.follower.wake([str(driven.session)])
        driven.step()
        driven.mono.advance(every)
        now = committed_frames(ledger)
        written += now - last if now >= last else now  # (a checkpoint starts the WAL again)
        last = now
    for _ in range(12):  # the last batch, read within a few quiet ticks
        driven.mono.advance(1.0)
        driven.step()
    now = committed_frames(ledger)
    written += now - last if now >= last else now
    assert driven.requests() == 1 + LINES
    per_line = written * (PAGE_SIZE + 24) / LINES
    assert per_line < 64 * 1024, f"{per_line / 1024:.0f} KiB of WAL per line"


def test_lines_waiting_for_their_batch_are_read_at_a_clean_stop(tmp_path: Path) -> None:
    """A line whose pass was put off is in the ledger once the daemon closes."""
    from exporter.ledger.store import Ledger

    d = Driven(tmp_path)
    d.step()
    for msg in ("first", "second"):  # the second comes within the batch's seconds: put off
        d.append(msg)
        d.daemon.follower.wake([str(d.session)])
        d.step()
    assert d.requests() == 2
    d.daemon.close()
    ledger = Ledger(d.daemon.parts.ledger_path)
    assert ledger.count() == 3
    ledger.close()
