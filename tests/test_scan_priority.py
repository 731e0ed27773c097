"""A pass's parser processes run at a lower priority than the process that writes the ledger."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.ingest.scan import PARSER_NICE
from tests.support.scan import REAL_TOTALS, scanner, totals

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(),
                                reason="reads the process tree from Linux's /proc")


def _children_priorities() -> dict[int, int]:
    """The scheduling priority (nice value) of every child process of this one."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue  # a thread that ended meanwhile
    out = {}
    for pid in pids:
        try:
            out[pid] = os.getpriority(os.PRIO_PROCESS, pid)
        except OSError:
            continue  # a child that ended meanwhile
    return out


def _parsers_seen(tree: Path, state: Path, **kw: int) -> dict[int, list[int]]:
    """Run one pooled pass; every priority seen of each child process it started (its parsers).

    Children this process had before the pass (servers of other tests) are not its.
    The priorities of a parser are in the order seen: the first may predate its
    initializer (a worker forked but not yet started), the last is after its work.
    """
    before = set(_children_priorities())
    seen: dict[int, list[int]] = {}

    def look(_done: int, _total: int) -> None:
        for pid, nice in _children_priorities().items():
            seen.setdefault(pid, []).append(nice)

    scan = scanner(tree, state, workers=2, parallel_min_bytes=0, **kw)
    scan.scan(progress=look)
    assert totals(scan.ledger.requests()) == REAL_TOTALS
    scan.ledger.close()
    return {pid: nices for pid, nices in seen.items() if pid not in before}


def test_parsers_run_at_a_lower_priority(real_tree: Path, tmp_path: Path) -> None:
    """Every parser process ends a pass PARSER_NICE lower than this process, and is never above."""
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = min(ours + PARSER_NICE, 19)
    seen = _parsers_seen(real_tree, tmp_path / "state")
    assert seen, "no parser process was alive during the pass"
    # The last look is after the last unit's result, with every parser still alive. A look
    # may catch a parser between its fork and its initializer (at ours): on a busy machine
    # the last one too, for a parser that a faster one left no unit to (its initializer
    # runs before its first unit). Once lowered, a parser stays so.
    lowered_once = [nices for nices in seen.values() if lowered in nices]
    assert lowered_once, "no parser process was seen at the lower priority"
    assert {nices[-1] for nices in lowered_once} == {lowered}
    assert all(nices[nices.index(lowered):] == [lowered] * (len(nices) - nices.index(lowered))
               for nices in lowered_once)
    assert {n for nices in seen.values() for n in nices} <= {ours, lowered}


def test_parsers_priority_is_a_parameter(real_tree: Path, tmp_path: Path) -> None:
    """With parser_nice=0 the parser processes run at this process's own priority."""
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    seen = _parsers_seen(real_tree, tmp_path / "state", parser_nice=0)
    assert seen
    assert {n for nices in seen.values() for n in nices} == {ours}
