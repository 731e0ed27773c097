"""Histogram percentiles equal nearest-rank ones; a writer keeps the slots they need."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from exporter.ledger import slot_sums, slots
from exporter.ledger.schema import UNINDEXED_INDEX, VALUE_INDEXES
from exporter.ledger.store import Ledger
from exporter.ledger.unindexed import FOLDED, WAITING
from exporter.projections.class_prices import ClassPrices
from exporter.projections.counting import Counting
from exporter.projections.percentiles import MAIN_SQL, Histograms, kth, percentile
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.pricing import RateTable
from exporter.projections.selection import Selection
from exporter.sqlite import sqlite3
from tests.support.requests_table import COLUMNS, REQUESTS

DAY = 86_400
START = 1_770_000_000.0 - 1_770_000_000.0 % DAY  # a UTC midnight


def spread_rows(n: int, seed: int, days: int = 40) -> list[tuple[Any, ...]]:
    """Requests over ``days`` days with wide, heavy-tailed prompt, output and gap values."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = round(START + rng.uniform(0, days * DAY), 3)
        source = rng.choice([0, 0, 0, 1])
        gap = None if source or rng.random() < 0.1 else round(rng.lognormvariate(3, 2.5), 3)
        out.append((f"k{i}", ts, "opus", f"s{rng.randrange(9)}", "/a", source,
                    rng.randrange(20), int(rng.lognormvariate(5, 2)),
                    rng.choice([0, int(rng.lognormvariate(11, 1))]), rng.randrange(3000),
                    rng.choice([0, 0, 65, 64, 63, 128]), "", "", "", 0, gap,
                    rng.choice([1, 2, 4])))
    return out


def slotted(data: list[tuple[Any, ...]], waiting: float = 0.0) -> sqlite3.Connection:
    """An in-memory ledger of ``data`` with indexes like the ledger's and rebuilt slots.

    ``waiting``: the share of rows (drawn at random) left outside the value
    indexes, as a live writer leaves them until a fold.
    """
    db = sqlite3.connect(":memory:")
    db.execute(REQUESTS.replace("roots INTEGER", "context INTEGER NOT NULL DEFAULT 0, "
                                "indexed INTEGER NOT NULL DEFAULT 1, roots INTEGER"))
    for statement in (*VALUE_INDEXES, UNINDEXED_INDEX, "CREATE INDEX requests_ts ON requests (ts)",
                      "CREATE INDEX requests_session_gap ON requests (session, gap) "
                      "WHERE gap IS NOT NULL"):
        db.execute(statement)
    db.executemany(f"INSERT INTO requests ({COLUMNS}) VALUES ({','.join('?' * 17)})", data)
    db.execute("UPDATE requests SET context = input + cache_read + cache_write_5m + "
               "cache_write_1h")
    rng = random.Random(len(data))
    db.executemany("UPDATE requests SET indexed = 0 WHERE id = ?",
                   [(i,) for i in range(1, len(data) + 1) if rng.random() < waiting])
    slot_sums.rebuild(db)
    return db


def selection(db: sqlite3.Connection, since: float | None, until: float | None,
              scope: str | None = None) -> Selection:
    """A selection over the slotted ledger, scoped by a roots condition."""
    def read(sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        return db.execute(sql, params).fetchall()
    relation = "requests"
    if scope is not None:
        db.execute(f"CREATE TEMP VIEW IF NOT EXISTS scoped AS SELECT * FROM requests WHERE {scope}")
        relation = "scoped"
    return Selection(read, relation, Range(since, until, UTC_ZONE), slots=True, days=True,
                     slot_thresholds=slots.stored_thresholds(db), slot_scope=scope,
                     context="context", unindexed=True)


def truth(data: list[tuple[Any, ...]], since: float | None, until: float | None,
          roots: int | None) -> dict[str, list[float]]:
    """Each measure's values in the range and scope, sorted."""
    kept = [r for r in data if (since is None or r[1] >= since) and (until is None or r[1] < until)
            and (roots is None or r[16] & roots)]
    return {
        "context": sorted(r[6] + r[8] + r[9] + r[10] for r in kept),
        "output": sorted(r[7] for r in kept),
        "gap": sorted(r[15] for r in kept if r[5] == 0 and r[15] is not None),
    }


RANGES = [
    (None, None),
    (START + 3 * DAY, None),  # whole days to the end
    (START + 2.5 * DAY, START + 37.25 * DAY),  # partial days at both ends, blocks between
    (START + 17 * DAY + 11, START + 17 * DAY + 21_600),  # inside one day
    (START + 16 * DAY, START + 32 * DAY),  # exactly one block
    (None, START + 20.5 * DAY),
]


@pytest.mark.parametrize(("since", "until"), RANGES)
@pytest.mark.parametrize("roots", [None, 2])
def test_histogram_percentiles_equal_sorted_values(since: float | None, until: float | None,
                                                   roots: int | None) -> None:
    """p50, p90 and the maximum of each measure equal nearest-rank values, in range and scope."""
    data = spread_rows(6000, 11)
    db = slotted(data)
    sel = selection(db, since, until, None if roots is None else f"(roots & {roots}) != 0")
    hist = Histograms.of(sel)
    assert hist is not None
    want = truth(data, since, until, roots)
    assert len(want["gap"]) > 5
    for measure, name in ((slots.CONTEXT_HIST, "context"), (slots.OUTPUT_HIST, "output"),
                          (slots.GAP_HIST, "gap")):
        values = want[name]
        got = hist.ranks(measure, (1, 50, 90, 99, 100))
        assert got == [percentile(values, p) for p in (1, 50, 90, 99, 100)], name
        assert sum(n for _, n in hist.counts(measure)) == len(values)


@pytest.mark.parametrize("waiting", [0.3, 1.0])
@pytest.mark.parametrize(("since", "until"), RANGES[:4])
def test_percentiles_merge_the_rows_waiting_outside_the_value_indexes(
        since: float | None, until: float | None, waiting: float) -> None:
    """With rows outside the value indexes, histogram and walked percentiles stay nearest-rank."""
    data = spread_rows(3000, 14)
    db = slotted(data, waiting)
    assert db.execute("SELECT count(*) FROM requests WHERE indexed = 0").fetchone()[0] > 0
    sel = selection(db, since, until, "(roots & 2) != 0")
    hist = Histograms.of(sel)
    assert hist is not None
    want = truth(data, since, until, 2)
    percents = (1, 50, 90, 99, 100)
    for measure, name in ((slots.CONTEXT_HIST, "context"), (slots.OUTPUT_HIST, "output"),
                          (slots.GAP_HIST, "gap")):
        values = want[name]
        assert hist.ranks(measure, percents) == [percentile(values, p) for p in percents], name
        gap = (MAIN_SQL, "gap IS NOT NULL") if name == "gap" else ()
        walked = [kth(sel, name, *gap, p=p, n=len(values)) for p in percents]
        assert walked == [percentile(values, p) for p in percents], name


def test_percentile_reads_take_the_value_indexes_and_the_waiting_rows_index() -> None:
    """Each walk reads a partial value index alone, never sorting; waiting rows come by theirs."""
    db = slotted(spread_rows(2000, 15), 0.5)
    base = selection(db, START + 2.5 * DAY, START + 37.25 * DAY)
    walks: list[tuple[str, Any]] = []
    waits: list[tuple[str, Any]] = []

    def read(sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        if FOLDED in sql and "ORDER BY" in sql:
            walks.append((sql, params))
        if WAITING in sql:
            waits.append((sql, params))
        return db.execute(sql, params).fetchall()

    sel = dataclasses.replace(base, read=read)
    hist = Histograms.of(sel)
    assert hist is not None
    for measure in (slots.CONTEXT_HIST, slots.OUTPUT_HIST, slots.GAP_HIST):
        hist.ranks(measure, (50, 90, 100))
    for name in ("context", "output"):
        kth(dataclasses.replace(sel, range=Range(None, None, UTC_ZONE)), name, p=90, n=2000)
    assert len(walks) >= 10
    assert len(waits) == len(walks)
    for sql, params in walks:
        plan = [row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        assert any("COVERING INDEX requests_" in step for step in plan), (sql, plan)
        assert not any("TEMP B-TREE" in step for step in plan), (sql, plan)
    for sql, params in waits:  # (a scan of the session-gap index was 30 ms on a year)
        plan = [row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        assert plan == ["SEARCH r USING INDEX requests_unindexed (indexed=?)"], (sql, plan)


def test_histograms_follow_a_refresh() -> None:
    """After rows change and their slots are refreshed, the percentiles follow the new values."""
    data = spread_rows(3000, 12, days=20)
    db = slotted(data)
    db.execute("UPDATE requests SET output = output * 7 + 1 WHERE id % 3 = 0")
    changed = [r[0] for r in db.execute("SELECT ts FROM requests WHERE id % 3 = 0")]
    slot_sums.refresh(db, [slots.slot_of(ts) for ts in changed])
    values = sorted(r[0] for r in db.execute("SELECT output FROM requests"))
    hist = Histograms.of(selection(db, None, None))
    assert hist is not None
    assert hist.ranks(slots.OUTPUT_HIST, (50, 90, 100)) == [percentile(values, p)
                                                            for p in (50, 90, 100)]


def test_an_old_slot_layout_is_not_used() -> None:
    """Slots of an older layout (no version): the histograms decline and figures use the index."""
    db = slotted(spread_rows(200, 13))
    db.execute("DELETE FROM slot_meta WHERE name = 'version'")
    assert Histograms.of(selection(db, None, None)) is None
    assert slot_sums.needs_ensure(db)
    assert slot_sums.ensure(db, [100_000])
    assert slots.stored_thresholds(db) == (100_000, 200_000)
    assert Histograms.of(selection(db, None, None)) is not None
    assert not slot_sums.needs_ensure(db, [200_000])  # a subset of the split: nothing to do


def test_bins_bound_their_values() -> None:
    """Every value lies in the bounds of its bin, and bins are under 1/32 of their value wide."""
    db = sqlite3.connect(":memory:")
    rng = random.Random(5)
    values = [*range(200), *(int(rng.lognormvariate(8, 4)) for _ in range(3000)), 2**40 + 12345]
    for v in values:
        (b,), = db.execute(f"SELECT {slots.bin_sql('?1')}", (v,)).fetchall()
        lo, hi = slots.bin_bounds(b)
        assert lo <= v < hi
        assert hi - lo == 1 or (hi - lo) * 32 <= lo


def test_a_writer_splits_the_slots_by_the_price_tables_thresholds(tmp_path: Path) -> None:
    """A ledger opened with counting rules splits its slots by every threshold of their prices."""
    pricing = RateTable.load()
    rules = Counting(pricing, {}, 0.0)
    assert 100_000 in rules.long_context_thresholds
    Ledger(tmp_path / "ledger.sqlite3").close()  # no rules: the slots' own split
    db = sqlite3.connect(tmp_path / "ledger.sqlite3")
    assert slots.stored_thresholds(db) == slots.DEFAULT_THRESHOLDS
    assert slots.version(db) == slots.VERSION
    db.close()
    Ledger(tmp_path / "ledger.sqlite3", rules=rules).close()
    db = sqlite3.connect(tmp_path / "ledger.sqlite3")
    stored = slots.stored_thresholds(db)
    db.close()
    assert set(rules.long_context_thresholds) <= set(stored)
    assert ClassPrices.of(pricing).fits_slots(stored)
    Ledger(tmp_path / "ledger.sqlite3").close()  # fewer wanted: the split stays
    db = sqlite3.connect(tmp_path / "ledger.sqlite3")
    assert slots.stored_thresholds(db) == stored
    db.close()
