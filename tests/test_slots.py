"""The ledger's usage slots equal sums computed request by request, after any refresh."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from exporter.ledger import slot_sums, slots
from exporter.ledger.schema import create_slot_tables
from exporter.sqlite import sqlite3
from tests.support.requests_table import COLUMNS, REQUESTS


def rows(n: int, seed: int) -> list[tuple[Any, ...]]:
    """Random requests in a few sessions over two days, some at slot and minute bounds."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = 1.77e9 + rng.choice([rng.uniform(0, 172_800), 300.0 * rng.randrange(576),
                                  60.0 * rng.randrange(2880) - 0.001])
        source = rng.choice([0, 0, 0, 1, 2])
        gap = None if source or rng.random() < 0.1 else rng.choice([0.5, 120.0, 120.001, 300.0,
                                                                    3600.0, 3600.5, 9000.0])
        out.append((f"k{i}", round(ts, 3), rng.choice(["opus", "sonnet"]), f"s{rng.randrange(4)}",
                    rng.choice(["/a", "/b"]), source, rng.randrange(10),
                    rng.randrange(1000), rng.choice([0, 150_000, 250_000]), rng.randrange(500),
                    rng.randrange(50), "", rng.choice(["", "us"]), rng.choice(["", "fast"]),
                    rng.randrange(3), gap, rng.choice([1, 2, 3])))
    return out


def ledger(data: list[tuple[Any, ...]]) -> sqlite3.Connection:
    """An in-memory requests table in the ledger's v2 shape, with slots created."""
    db = sqlite3.connect(":memory:")
    db.execute(REQUESTS)
    db.execute("CREATE INDEX requests_ts ON requests (ts)")
    db.executemany(f"INSERT INTO requests ({COLUMNS}) VALUES ({','.join('?' * 17)})", data)
    create_slot_tables(db)
    return db


def bucket(source: int, gap: float | None) -> int:
    """The slot bucket of a request, written out independently of the SQL."""
    if source:
        return -1
    if gap is None:
        return 0
    return 1 if gap <= 120 else 2 if gap <= 300 else 3 if gap <= 3600 else 4


def expected(data: list[tuple[Any, ...]],
             thresholds: tuple[int, ...] = slots.DEFAULT_THRESHOLDS,
             ) -> dict[tuple[Any, ...], list[Any]]:
    """Slot sums computed request by request in Python."""
    out: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0] * 9 + [0.0, 0.0] + [0] * 5)
    for (_, ts, model, session, project, source, inp, outp, read, w5, w1, tier, geo, speed,
         search, gap, roots) in data:
        long = sum(inp + read + w5 + w1 > t for t in thresholds)
        key = (int(ts // 300), session, project, model, source, tier, geo, speed, long, roots,
               bucket(source, gap))
        acc = out[key]
        for i, v in enumerate((1, inp, outp, read, w5, w1, search)):
            acc[i] += v
        acc[8] += round((gap or 0.0) * 1000)
        acc[9] = ts if acc[0] == 1 else min(acc[9], ts)
        acc[10] = max(acc[10], ts)
        acc[11 + int(ts // 60) % 5] += 1
    return {k: [*v[:7], *v[8:]] for k, v in out.items()}


def stored(db: sqlite3.Connection) -> dict[tuple[Any, ...], list[Any]]:
    """The slots table joined back to its keys, in the shape of :func:`expected`."""
    got = db.execute(
        "SELECT s.slot, ss.session, k.project, k.model, k.source, k.service_tier, "
        "k.inference_geo, k.speed, k.long, s.roots, s.bucket, s.n, s.input, s.output, "
        "s.cache_read, s.cache_write_5m, s.cache_write_1h, s.web_search, coalesce(s.gap_ms, 0), "
        "s.first, s.last, s.m0, s.m1, s.m2, s.m3, s.m4, s.sid = k.sid FROM slots s "
        "JOIN slot_keys k ON k.id = s.key JOIN slot_sessions ss ON ss.id = k.sid"
    ).fetchall()
    assert all(r[-1] for r in got)
    return {(*r[:8], int(r[8]), *r[9:11]): [*r[11:18], *r[18:26]] for r in got}


def approx(a: dict[tuple[Any, ...], list[Any]], b: dict[tuple[Any, ...], list[Any]]) -> None:
    """Equal keys and values (gap sums in whole milliseconds: exact)."""
    assert a.keys() == b.keys()
    for key, want in b.items():
        assert a[key] == want, key


def test_rebuild_equals_request_by_request_sums() -> None:
    """A full rebuild gives every slot's sums, keys, bucket and minute counts exactly."""
    data = rows(3000, 1)
    db = ledger(data)
    slot_sums.rebuild(db)
    approx(stored(db), expected(data))


def test_rebuild_with_keys_read_elsewhere_equals_one_that_reads_them() -> None:
    """Slot keys read beforehand (as on another connection) give the same slots; stale ones not."""
    data = rows(3000, 2)
    db = ledger(data)
    keys = slot_sums.key_rows(db)
    assert keys[0] == slots.DEFAULT_THRESHOLDS and len(keys[1]) == len(set(keys[1]))
    slot_sums.rebuild(db, keys=lambda: keys)
    approx(stored(db), expected(data))
    stale = ledger(data)
    slot_sums.rebuild(stale, keys=lambda: ((1,), [("s9", "/z", "opus", 0, "", "", "", 1)]))
    approx(stored(stale), expected(data))  # summed by the stored thresholds, not the stale ones
    assert not stale.execute("SELECT 1 FROM slot_sessions WHERE session = 's9'").fetchall()


def test_refresh_of_changed_slots_keeps_everything_exact() -> None:
    """Changing rows (new times, tokens, gaps, roots) and refreshing their slots is exact."""
    data = rows(2000, 2)
    db = ledger(data)
    slot_sums.rebuild(db)
    rng = random.Random(5)
    touched: set[int] = set()
    for i in rng.sample(range(len(data)), 300):
        old = data[i]
        new_ts = round(old[1] - rng.uniform(0, 4000), 3)
        new = (*old[:1], new_ts, *old[2:7], old[7] + 5, *old[8:15], rng.choice([None, 50.0]),
               old[16] | 4)
        data[i] = new
        db.execute("UPDATE requests SET ts = ?, output = ?, gap = ?, roots = ? WHERE key = ?",
                   (new[1], new[7], new[15], new[16], new[0]))
        touched |= {slots.slot_of(old[1]), slots.slot_of(new_ts)}
    slot_sums.refresh(db, touched)
    approx(stored(db), expected(data))


def test_refresh_is_idempotent_and_empty_refresh_is_harmless() -> None:
    """Refreshing twice, or refreshing slots with no requests, changes nothing."""
    data = rows(500, 3)
    db = ledger(data)
    slot_sums.rebuild(db)
    before = stored(db)
    slot_sums.refresh(db, [slots.slot_of(r[1]) for r in data])
    slot_sums.refresh(db, [1, 2, 3])
    assert stored(db) == before


def test_runs_merge_near_slots_only() -> None:
    """Touched slots close together are refreshed as one range; far ones separately."""
    assert list(slot_sums._runs([5, 1, 2, 40, 200])) == [(1, 40), (200, 200)]
    assert list(slot_sums._runs([])) == []


def test_days_are_the_sums_of_their_slots() -> None:
    """Each UTC day row equals the sums of that day's slot rows, after rebuilds and refreshes."""
    data = rows(2000, 6)
    db = ledger(data)
    slot_sums.rebuild(db)
    slot_sums.refresh(db, [slots.slot_of(data[0][1]), slots.slot_of(data[-1][1])])
    sums = ("sum(n), sum(input), sum(output), sum(cache_read), sum(cache_write_5m), "
            "sum(cache_write_1h), sum(web_search), sum(gap_ms), min(first), max(last)")
    from_slots = db.execute(f"SELECT slot / 288, key, roots, bucket, sid, {sums} FROM slots "
                            "GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4").fetchall()
    days = db.execute("SELECT * FROM slot_days ORDER BY 1, 2, 3, 4").fetchall()
    assert days == from_slots and len({d[0] for d in days}) >= 2


def test_day_peaks_are_each_days_busiest_minute_and_ten_minutes() -> None:
    """Each day's stored peaks equal the busiest minute and 10-minute window of its requests."""
    data = rows(3000, 8)
    db = ledger(data)
    slot_sums.rebuild(db)
    minutes: dict[int, int] = defaultdict(int)
    windows: dict[int, set[str]] = defaultdict(set)
    for row in data:
        minutes[int(row[1] // 60)] += 1
        windows[int(row[1] // 600)].add(row[3])
    want: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for minute, n in minutes.items():
        want[minute // 1440][0] = max(want[minute // 1440][0], n)
    for window, sessions in windows.items():
        want[window // 144][1] = max(want[window // 144][1], len(sessions))
    got = {d: [m, s] for d, m, s in db.execute("SELECT * FROM slot_day_peaks")}
    assert got == dict(want)


def test_new_thresholds_rebuild_the_slots_by_level() -> None:
    """Other long-context thresholds: the slots are summed again by level over them."""
    data = rows(1500, 9)
    db = ledger(data)
    slot_sums.rebuild(db)
    assert slots.stored_thresholds(db) == (200_000,)
    assert slot_sums.use_thresholds(db, [200_000, 100_000]) is True
    assert slots.stored_thresholds(db) == (100_000, 200_000)
    approx(stored(db), expected(data, (100_000, 200_000)))
    assert slot_sums.use_thresholds(db, (100_000, 200_000)) is False  # the same: no rebuild
    slot_sums.refresh(db, [slots.slot_of(r[1]) for r in data[:50]])
    approx(stored(db), expected(data, (100_000, 200_000)))


def test_block_sums_are_their_days_sums_after_a_refresh() -> None:
    """Each 16-day block's sums equal its days' sums, after a rebuild and after a refresh."""
    data = rows(2000, 10)
    db = ledger(data)
    slot_sums.rebuild(db)
    db.execute("UPDATE requests SET output = output + 5, ts = ts + 86400 * 20 WHERE id % 4 = 0")
    moved = [r[0] for r in db.execute("SELECT ts FROM requests WHERE id % 4 = 0")]
    slot_sums.refresh(db, [slots.slot_of(ts) for ts in moved]
                  + [slots.slot_of(ts - 86400 * 20) for ts in moved])
    columns = "n, input, output, cache_read, cache_write_5m, cache_write_1h, web_search, gap_ms"
    sums = ", ".join(f"sum({c})" for c in columns.split(", "))
    days = db.execute(f"SELECT day / {slots.BLOCK_DAYS}, key, roots, bucket, {sums}, min(first), "
                      "max(last) FROM slot_days GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4").fetchall()
    blocks = db.execute(f"SELECT block, key, roots, bucket, {columns}, first, last "
                        "FROM slot_blocks ORDER BY 1, 2, 3, 4").fetchall()
    assert blocks == days
    assert len({b[0] for b in blocks}) == 2
    total = db.execute("SELECT count(*), sum(output) FROM requests").fetchone()
    assert db.execute("SELECT sum(n), sum(output) FROM slot_blocks").fetchone() == total
