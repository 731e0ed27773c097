"""Histogram percentiles equal nearest-rank ones; a writer keeps the slots they need."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from exporter.ledger import slot_sums, slots
from exporter.ledger.store import Ledger
from exporter.projections.class_prices import ClassPrices
from exporter.projections.counting import Counting
from exporter.projections.percentiles import Histograms, percentile
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


def slotted(data: list[tuple[Any, ...]]) -> sqlite3.Connection:
    """An in-memory ledger of ``data`` with indexes like the ledger's and rebuilt slots."""
    db = sqlite3.connect(":memory:")
    db.execute(REQUESTS.replace("roots INTEGER", "context INTEGER NOT NULL DEFAULT 0, "
                                                  "roots INTEGER"))
    for column in ("ts", "context, ts", "output, ts", "gap, ts"):
        db.execute(f"CREATE INDEX requests_{column.split(',')[0]} ON requests ({column})")
    db.executemany(f"INSERT INTO requests ({COLUMNS}) VALUES ({','.join('?' * 17)})", data)
    db.execute("UPDATE requests SET context = input + cache_read + cache_write_5m + "
               "cache_write_1h")
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
                     context="context")


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
