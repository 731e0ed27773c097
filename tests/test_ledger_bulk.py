"""The ledger's raw pass (a first pass into an empty ledger): the same ledger, crash-safe."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.ingest.scan import Scanner
from exporter.ledger import classes, slot_sums
from exporter.ledger.staging import RAW_PASS
from exporter.ledger.store import Ledger, LedgerError
from exporter.projections.metrics import MetricsOptions
from exporter.projections.pricing import RateTable
from exporter.records import Applied, Parsed, Request, Source
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate
from tests.support.ledgers import appearances, ledger_of
from tests.support.scan import counting_ledger, killed_pass


def _dump(ledger: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    """Every table a pass writes, in a form that does not depend on row ids."""
    read = ledger.read
    return {
        "requests": read("SELECT key, ts, model, session, project, source, input, output, "
                         "cache_read, cache_write_5m, cache_write_1h, service_tier, inference_geo, "
                         "speed, recorded_cost_usd, web_search, gap, context, roots "
                         "FROM requests ORDER BY key"),
        "appearances": read("SELECT r.key, f.path, a.prev FROM appearances a JOIN requests r "
                            "ON r.id = a.request JOIN files f ON f.id = a.file ORDER BY 1, 2"),
        "files": read("SELECT f.path, r.path, f.session FROM files f LEFT JOIN roots r "
                      "ON r.id = f.root ORDER BY 1"),
        "sessions": read("SELECT * FROM sessions ORDER BY 1"),
        "counts": read("SELECT * FROM rollup_counts ORDER BY roots, model, project, source, "
                       "geo, tier, speed, long, period, gap"),
        "hists": read("SELECT * FROM rollup_hist ORDER BY 1, 2, 3, 4, 5, 6"),
        "unsettled": read("SELECT r.key FROM unsettled u JOIN requests r ON r.id = u.request "
                          "ORDER BY 1"),
        "counters": read("SELECT * FROM counters ORDER BY 1, 2"),
        "checkpoints": read("SELECT path, size, offset FROM checkpoints ORDER BY 1"),
        "slots": read("SELECT s.slot, ss.session, k.project, k.model, k.source, k.service_tier, "
                      "k.inference_geo, k.speed, k.long, s.roots, s.bucket, s.n, s.input, "
                      "s.output, s.cache_read, s.cache_write_5m, s.cache_write_1h, "
                      "s.web_search, s.gap_ms, s.first, s.last, s.m0, s.m1, s.m2, s.m3, s.m4 "
                      "FROM slots s JOIN slot_keys k ON k.id = s.key "
                      "JOIN slot_sessions ss ON ss.id = s.sid ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, "
                      "9, 10, 11"),
        "days": read("SELECT d.day, ss.session, k.project, k.model, d.roots, d.bucket, d.n, "
                     "d.output, d.gap_ms, d.first, d.last FROM slot_days d JOIN slot_keys k "
                     "ON k.id = d.key JOIN slot_sessions ss ON ss.id = d.sid "
                     "ORDER BY 1, 2, 3, 4, 5, 6, 7, 8"),
        "peaks": read("SELECT * FROM slot_day_peaks ORDER BY 1"),
        "value_bins": read("SELECT * FROM slot_hist ORDER BY 1, 2, 3, 4, 5"),
        "blocks": read("SELECT b.block, ss.session, k.project, k.model, k.source, k.long, "
                       "b.roots, b.bucket, b.n, b.input, b.output, b.cache_read, "
                       "b.cache_write_5m, b.cache_write_1h, b.gap_ms, b.first, b.last "
                       "FROM slot_blocks b JOIN slot_keys k ON k.id = b.key "
                       "JOIN slot_sessions ss ON ss.id = b.sid ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, "
                       "9, 10, 11, 12, 13, 14, 15, 16, 17"),  # keys alike but for tier and geo
        "session_blocks": read("SELECT b.block, ss.session, b.roots, b.n, b.output "
                               "FROM slot_session_blocks b JOIN slot_sessions ss "
                               "ON ss.id = b.sid ORDER BY 1, 2, 3"),
    }


def _ingest(tree: Path, state: Path, *, watched: bool, batch_bytes: int = 64 * 1024) -> Ledger:
    """One pass over ``tree`` into a new ledger; ``watched`` forces the incremental path."""
    ledger = counting_ledger(state / "l.db")
    watcher: Callable[[Applied], None] | None = (lambda _a: None) if watched else None
    Scanner(ledger, [tree / "projects"], workers=1, batch_bytes=batch_bytes,
            on_applied=watcher).scan()
    return ledger


@pytest.fixture(scope="module")
def resumed_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated tree with resumed sessions, subagents, compactions and malformed lines."""
    root = tmp_path_factory.mktemp("bulk") / "tree"
    generate(root, GenOptions(seed=5, sessions=6, requests_per_session=80))
    return root


@pytest.mark.parametrize("batch_bytes", [64 * 1024, 1 << 30])
def test_raw_pass_equals_the_incremental_path(resumed_tree: Path, tmp_path: Path,
                                              batch_bytes: int) -> None:
    """Rows, gaps, owners, provenance, rollups and slots are the same by either path."""
    raw = _ingest(resumed_tree, tmp_path / "raw", watched=False, batch_bytes=batch_bytes)
    inc = _ingest(resumed_tree, tmp_path / "inc", watched=True, batch_bytes=batch_bytes)
    got, want = _dump(raw), _dump(inc)
    assert got["requests"] and got["slots"] and got["counts"]
    _same(got, want)


def _same(got: dict[str, list[tuple[Any, ...]]], want: dict[str, list[tuple[Any, ...]]]) -> None:
    """Equal tables; a counter rollup's first and last times within the other's bounds.

    The incremental path widens a class's time bounds by a request's time
    before a later copy moved it earlier (bounds only grow); a raw pass counts
    the rows as they end up, as a rebuild of the rollups would.
    """
    for table, rows in want.items():
        if table == "counts":
            assert [r[:10] + r[12:] for r in got[table]] == [r[:10] + r[12:] for r in rows]
            assert all(w[10] <= g[10] and g[11] <= w[11]
                       for g, w in zip(got[table], rows, strict=True))
        else:
            assert got[table] == rows, table


def test_raw_pass_equals_the_incremental_path_on_real_transcripts(real_tree: Path,
                                                                  tmp_path: Path) -> None:
    """The same on the real fixture transcripts (streaming splits, progress copies)."""
    raw = _ingest(real_tree, tmp_path / "raw", watched=False, batch_bytes=4096)
    inc = _ingest(real_tree, tmp_path / "inc", watched=True, batch_bytes=4096)
    _same(_dump(raw), _dump(inc))


def test_raw_pass_is_only_taken_on_an_empty_ledger(resumed_tree: Path, tmp_path: Path) -> None:
    """A second pass (the ledger holds rows) is incremental: its batches carry their rows."""
    tree = tmp_path / "tree"
    shutil.copytree(resumed_tree, tree)
    ledger = counting_ledger(tmp_path / "l.db")
    first = Scanner(ledger, [tree / "projects"], workers=1).scan()
    assert first.new_requests == ledger.count() > 0
    extra = tree / "projects" / "-home-u-extra" / "x.jsonl"
    extra.parent.mkdir(parents=True)
    extra.write_bytes(b'{"type":"assistant","sessionId":"x","cwd":"/x","timestamp":'
                      b'"2026-10-02T00:00:00.000Z","requestId":"rq","message":{"id":"mx",'
                      b'"model":"claude-opus-4-6","usage":{"input_tokens":1,"output_tokens":2}}}\n')
    seen: list[Applied] = []
    Scanner(ledger, [tree / "projects"], workers=1, on_applied=seen.append).scan()
    assert [len(a.new) for a in seen] == [1] and seen[0].counts


def test_raw_pass_cut_short_is_derived_on_the_next_open(resumed_tree: Path,
                                                         tmp_path: Path) -> None:
    """A raw pass killed midway: the next open derives it; a further pass completes it exactly."""
    killed_pass(resumed_tree, tmp_path / "cut", kill_after=5)
    reopened = counting_ledger(tmp_path / "cut" / "l.db")
    assert reopened.read("SELECT value FROM meta WHERE name = ?", (RAW_PASS,)) == []
    partial = reopened.count()
    assert partial > 0
    # What the killed pass committed is already whole: its rollups count every row.
    (total,) = reopened.read("SELECT sum(requests) FROM rollup_counts")[0]
    assert total == partial
    Scanner(reopened, [resumed_tree / "projects"], workers=1).scan()
    fresh = _ingest(resumed_tree, tmp_path / "fresh", watched=False)
    _same(_dump(fresh), _dump(reopened))


def test_raw_pass_killed_between_its_end_transactions_is_derived_alike(
        resumed_tree: Path, tmp_path: Path) -> None:
    """Killed once its gaps and owners are committed, before its rollups: the next open ends it."""
    state = tmp_path / "cut"
    code = f"""
import os, signal
from pathlib import Path
from exporter.ingest.scan import Scanner
from tests.support.scan import counting_ledger
ledger = counting_ledger(Path({str(state / 'l.db')!r}))
# The second transaction of the end stamps the slots' layout: die there.
ledger._db.create_function("die", 0, lambda: os.kill(os.getpid(), signal.SIGKILL))
ledger._db.execute("CREATE TEMP TRIGGER die BEFORE INSERT ON slot_meta BEGIN SELECT die(); END")
Scanner(ledger, [Path({str(resumed_tree / 'projects')!r})], workers=1).scan()
raise SystemExit("the pass was not killed")
"""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          timeout=120, check=False)
    assert proc.returncode == -9, proc.stderr.decode()
    with sqlite3.connect(state / "l.db") as db:  # gaps committed, the flag still set
        flag = db.execute("SELECT count(*) FROM meta WHERE name = ?", (RAW_PASS,)).fetchone()
        assert flag == (1,)
        assert db.execute("SELECT count(gap) FROM requests").fetchone()[0] > 0
        assert db.execute("SELECT count(*) FROM rollup_counts").fetchone() == (0,)
    reopened = counting_ledger(state / "l.db")
    fresh = _ingest(resumed_tree, tmp_path / "fresh", watched=False)
    _same(_dump(fresh), _dump(reopened))
    assert reopened.read("SELECT count(*) FROM meta WHERE name = ?", (RAW_PASS,)) == [(0,)]


def test_incremental_chains_follow_appends_in_any_time_order(tmp_path: Path) -> None:
    """Appends over many passes give the gaps, predecessors and owners of one raw pass.

    Times are out of order; later copies move a request earlier or make it a
    sidechain; a resume copies another file's requests.
    """
    import random

    from tests.support.records import assistant, jsonl

    rng = random.Random(3)
    tree = tmp_path / "tree"
    proj = tree / "projects" / "-p"
    proj.mkdir(parents=True)

    def line(n: int, minute: int, session: str, **kw: Any) -> bytes:
        return jsonl(assistant(f"m{n}", f"r{n}", session=session,
                               ts=f"2026-10-01T{10 + minute // 60:02d}:{minute % 60:02d}:00.000Z",
                               usage={"output_tokens": rng.randint(1, 99)}, **kw))

    writes: list[tuple[str, bytes]] = []
    for n in range(60):
        minute = n * 3 + rng.randint(-7, 7)  # out of order by up to a few requests
        writes.append(("a.jsonl", line(n, max(minute, 0), "A")))
        if n % 5 == 0:  # the resume copies some, one minute earlier: the request moves
            writes.append(("b.jsonl", line(n, max(minute - 1, 0), "B")))
        if n % 11 == 0:  # a later copy marks it a sidechain: it leaves the main chain
            writes.append(("a.jsonl", line(n, max(minute, 0), "A", sidechain=True)))
    inc = counting_ledger(tmp_path / "inc.db")
    scanner = Scanner(inc, [tree / "projects"], workers=1, on_applied=lambda _a: None)
    for i, (name, data) in enumerate(writes):
        with (proj / name).open("ab") as fh:
            fh.write(data)
        if i % 3 == 0:
            scanner.scan()
    scanner.scan()
    raw = _ingest(tree, tmp_path / "raw", watched=False)
    got, want = _dump(raw), _dump(inc)
    assert any(r[16] is not None for r in got["requests"])  # gaps were computed
    for table in ("requests", "appearances", "files", "sessions", "slots", "days", "peaks"):
        assert got[table] == want[table], table


def test_new_rows_between_changed_ones_count_once(tmp_path: Path) -> None:
    """Growing two requests and appending one between them counts each once (slots, bins)."""
    t0 = 1_790_000_100.0  # a slot start: a, b and c fall in three slots of one day, one range

    def req(key: str, ts: float, output: int) -> Request:
        return Request(key, ts, "claude-opus-4-6", "s1", "/p", Source.MAIN, 5, output, 1000, 10, 0)

    old = [req("a", t0, 100), req("c", t0 + 1800, 100)]
    ledger = ledger_of(tmp_path / "l.db", old)
    batch = [req("a", t0, 200), req("b", t0 + 900, 100), req("c", t0 + 1800, 300)]
    parsed = Parsed()
    for r in batch:
        parsed.add(r)
    ledger.apply(parsed, [], 0, appearances(batch))
    assert ledger.read("SELECT count(*), sum(output) FROM requests") == [(3, 600)]
    assert ledger.read("SELECT sum(n), sum(output) FROM slots") == [(3, 600)]
    assert ledger.read("SELECT sum(n), sum(output) FROM slot_days") == [(3, 600)]
    # Output sizes' bins (measure 1), per day (span 0) and per block (span 1).
    assert ledger.read("SELECT span, sum(n) FROM slot_hist WHERE measure = 1 "
                       "GROUP BY span ORDER BY span") == [(0, 3), (1, 3)]
    # Every bin as a recount from the rows gives it: the grown rows left their old bins.
    kept = ledger.read("SELECT * FROM slot_hist ORDER BY 1, 2, 3, 4, 5")
    ledger.close()
    with sqlite3.connect(tmp_path / "l.db") as db:
        slot_sums.rebuild(db)
        assert db.execute("SELECT * FROM slot_hist ORDER BY 1, 2, 3, 4, 5").fetchall() == kept


def test_a_raw_pass_whose_end_fails_says_so(tmp_path: Path) -> None:
    """When the end of a raw pass cannot be written, the pass raises (and the next open derives)."""
    path = tmp_path / "l.db"
    ledger = counting_ledger(path)
    reqs = [Request(k, 1_790_000_000.0 + i, "claude-opus-4-6", "s1", "/p", Source.MAIN, 5, 10,
                    100, 1, 0) for i, k in enumerate("abc")]
    parsed = Parsed()
    for r in reqs:
        parsed.add(r)
    with pytest.raises(LedgerError), ledger.bulk(3, raw=True):
        assert ledger.raw
        ledger.apply(parsed, [], 0, appearances(reqs))
        with sqlite3.connect(path) as other:  # the pass's end cannot write its rollups
            other.execute("CREATE TRIGGER full BEFORE INSERT ON rollup_counts "
                          "BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    ledger.close()
    with sqlite3.connect(path) as other:
        other.execute("DROP TRIGGER full")
    again = counting_ledger(path)  # derives what the pass left
    assert again.read("SELECT count(*) FROM meta WHERE name = ?", (RAW_PASS,)) == [(0,)]
    assert again.read("SELECT sum(n) FROM slots") == [(3,)]
    again.close()


def _moving_tree(root: Path) -> Path:
    """Transcripts read in turn, the later ones moving the first one's requests.

    ``b`` (a resume) copies some of ``a``'s requests a minute earlier: they move
    earlier in ``a``'s chain; ``c`` copies others as sidechains: they leave it;
    both also bring requests of their own between ``a``'s. ``g`` moves ``f``'s
    sidechain requests, which are in no chain; ``i`` makes one of ``h``'s a sidechain.
    """
    from tests.support.records import assistant, jsonl

    proj = root / "projects" / "-p"
    proj.mkdir(parents=True)

    def line(n: int, minute: int, session: str, **kw: Any) -> bytes:
        return jsonl(assistant(f"m{n}", f"r{n}", session=session,
                               ts=f"2026-10-01T{10 + minute // 60:02d}:{minute % 60:02d}:00.000Z",
                               usage={"output_tokens": n + 1}, **kw))

    files: dict[str, list[bytes]] = {"a": [], "b": [], "c": []}
    for n in range(40):
        files["a"].append(line(n, n * 3, "A"))
        if n % 5 == 0:
            files["b"].append(line(n, max(n * 3 - 4, 0), "B"))
        if n % 7 == 3:
            files["c"].append(line(n, n * 3, "C", sidechain=True))
    files["b"].append(line(100, 31, "B"))
    files["c"].append(line(101, 62, "C"))
    # ``e`` copies one of ``d``'s requests as it is, after a request of its own: nothing
    # moves, but its predecessor there is later than in ``d`` (the gap shrinks).
    files["d"] = [line(200 + n, 150 + n * 3, "D") for n in range(10)]
    files["e"] = [line(300, 164, "E"), line(205, 165, "E")]
    # ``g`` copies ``f``'s sidechain requests a minute earlier, as sidechains: they move, in
    # no chain (``f``'s main chain stays as it was).
    files["f"] = [line(400 + n, 200 + n * 3, "F", sidechain=n % 2 == 1) for n in range(10)]
    files["g"] = [line(400 + n, 200 + n * 3 - 1, "G", sidechain=True) for n in (1, 5)]
    # ``i`` copies one of ``h``'s requests at its time as a sidechain: it leaves ``h``'s chain
    # without moving (nothing else of ``h`` moves).
    files["h"] = [line(500 + n, 260 + n * 3, "H") for n in range(6)]
    files["i"] = [line(502, 266, "I", sidechain=True)]
    for name, lines in files.items():
        (proj / f"{name}.jsonl").write_bytes(b"".join(lines))
    return root


def test_raw_pass_of_many_batches_rechains_what_later_batches_move(tmp_path: Path) -> None:
    """One file a batch: requests a later batch moves or makes sidechains chain as incrementally."""
    tree = _moving_tree(tmp_path / "tree")
    raw = _ingest(tree, tmp_path / "raw", watched=False, batch_bytes=1)
    inc = _ingest(tree, tmp_path / "inc", watched=True, batch_bytes=1)
    got, want = _dump(raw), _dump(inc)
    assert raw.read("SELECT count(*) FROM files") == [(9,)]
    assert any(r[16] is not None for r in got["requests"])
    # (The incremental path's counters keep the gap class a request was first counted
    # in: see test_incremental_chains_follow_appends_in_any_time_order.)
    for table in ("requests", "appearances", "files", "sessions", "slots", "days", "peaks"):
        assert got[table] == want[table], table
    whole = _ingest(tree, tmp_path / "whole", watched=False, batch_bytes=1 << 30)
    _same(_dump(whole), got)  # one batch, nothing to rechain: the same again


def test_raw_pass_of_many_batches_killed_before_its_end_is_derived_whole(
        tmp_path: Path) -> None:
    """Killed after every batch chained its files, before the end: the open derives it all."""
    tree = _moving_tree(tmp_path / "tree")
    killed_pass(tree, tmp_path / "cut", kill_after=9)  # one batch a file
    with sqlite3.connect(tmp_path / "cut" / "l.db") as db:  # a's chain, as its batch left it
        stale = db.execute("SELECT count(*) FROM appearances a JOIN requests r "
                           "ON r.id = a.request WHERE r.source != 0 AND a.prev IS NOT NULL")
        assert stale.fetchone()[0] > 0
    reopened = counting_ledger(tmp_path / "cut" / "l.db")
    fresh = _ingest(tree, tmp_path / "fresh", watched=False)
    _same(_dump(fresh), _dump(reopened))


def test_a_file_in_two_batches_of_a_raw_pass_is_chained_whole(tmp_path: Path) -> None:
    """A file that two batches of one raw pass bring (its chain spans both): chained as one."""
    t0 = 1_790_000_000.0

    def req(key: str, minute: int) -> Request:
        return Request(key, t0 + 60 * minute, "claude-opus-4-6", "s1", "/p", Source.MAIN, 5, 10,
                       100, 1, 0)

    halves = ([req("a", 0), req("c", 4)], [req("b", 2), req("d", 6)])  # interleaved in time
    ledgers = []
    for name, raw in (("raw", True), ("inc", False)):
        ledger = counting_ledger(tmp_path / f"{name}.db")
        with ledger.bulk(4, raw=raw):
            assert ledger.raw == raw
            for half in halves:
                parsed = Parsed()
                for r in half:
                    parsed.add(r)
                ledger.apply(parsed, [], 0, appearances(half))
        ledgers.append(ledger)
    got, want = (_dump(ledger) for ledger in ledgers)
    assert [r[16] for r in got["requests"]] == [None, 120.0, 120.0, 120.0]
    _same(got, want)


def test_a_raw_pass_settles_each_row_after_its_last_change(tmp_path: Path) -> None:
    """Rows wait to settle from the batch that last brought them, as incrementally."""
    t0 = 1_790_000_000.0
    now = [t0]

    def req(key: str, output: int) -> Request:
        return Request(key, t0, "claude-opus-4-6", "s1", "/p", Source.MAIN, 5, output, 100, 1, 0)

    batches = ([req("a", 10), req("c", 10)], [req("a", 20), req("b", 10)])
    dues = []
    for name, raw in (("raw", True), ("inc", False)):
        now[0] = t0
        ledger = Ledger(tmp_path / f"{name}.db", settle_seconds=60.0, clock=lambda: now[0],
                        rules=MetricsOptions().counting(RateTable.load()))
        with ledger.bulk(3, raw=raw):
            for batch in batches:
                parsed = Parsed()
                for r in batch:
                    parsed.add(r)
                ledger.apply(parsed, [], 0, appearances(batch))
                now[0] += 10.0
        dues.append(ledger.read("SELECT r.key, u.due FROM unsettled u JOIN requests r "
                                "ON r.id = u.request ORDER BY 1"))
        ledger.close()
    assert dues[0] == [("a", t0 + 70.0), ("b", t0 + 70.0), ("c", t0 + 60.0)]
    assert dues[0] == dues[1]


def test_a_raw_pass_knows_every_key_it_staged_and_few_others() -> None:
    """The pass's key filter never forgets a staged key (a miss would insert it twice)."""
    from exporter.ledger.staging import StagedKeys

    keys = StagedKeys()
    staged = [f"msg_{i:06d}\x1freq_{i:06d}" for i in range(20_000)]
    assert len(keys.check_and_add(staged)) < 20  # new keys, noted (a few look known to the others)
    assert keys.check_and_add(staged) == staged
    others = [f"msg_{i:06d}\x1freq_x" for i in range(20_000)]
    assert len(keys.check_and_add(others)) < 20  # false ones only cost a lookup
    assert keys.check_and_add(others) == others  # and now they are noted too


def test_a_raw_pass_gives_a_file_one_id_and_its_smallest_session(tmp_path: Path) -> None:
    """A file brought twice in a batch and again later (smaller session): as incrementally."""
    from exporter.records import Appearance
    from tests.support.ledgers import ROOT

    t0 = 1_790_000_000.0

    def req(key: str, minute: int, session: str) -> Request:
        return Request(key, t0 + 60 * minute, "claude-opus-4-6", session, "/p", Source.MAIN, 5,
                       10, 100, 1, 0)

    shared, other = f"{ROOT}/p/shared.jsonl", f"{ROOT}/p/other.jsonl"
    batches = [
        [(shared, "s3", [req("a", 0, "s3")]), (other, "s9", [req("x", 1, "s9")]),
         (shared, "s2", [req("b", 2, "s2")])],
        [(shared, "s1", [req("c", 4, "s1")])],
    ]
    ledgers = []
    for name, raw in (("raw", True), ("inc", False)):
        ledger = counting_ledger(tmp_path / f"{name}.db")
        with ledger.bulk(4, raw=raw):
            for batch in batches:
                parsed = Parsed()
                for _path, _session, reqs in batch:
                    for r in reqs:
                        parsed.add(r)
                apps = [Appearance(path, ROOT, session, tuple(r.key for r in reqs))
                        for path, session, reqs in batch]
                ledger.apply(parsed, [], 0, apps)
        ledgers.append(ledger)
    got, want = (_dump(ledger) for ledger in ledgers)
    assert [row[2] for row in got["files"]] == ["s9", "s1"]
    assert ledgers[0].read("SELECT path, id FROM files ORDER BY id") == [(shared, 1), (other, 2)]
    # (Not the owners: the incremental path keeps the owner it chose before the file's
    # session fell, which no real transcript does.)
    for table in ("files", "appearances", "sessions", "checkpoints"):
        assert got[table] == want[table], table


class _OffMidnight:
    """Counting rules whose price change falls inside a UTC day (the day sums cannot tell)."""

    def __init__(self, rules: Any) -> None:
        """Wrap ``rules``: the same classes, one more time cut."""
        self._rules = rules

    def __getattr__(self, name: str) -> Any:
        """Everything else as the wrapped rules."""
        return getattr(self._rules, name)

    def cuts(self, model: str) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        """The wrapped cuts, with a time cut at noon."""
        sizes, times, gaps = self._rules.cuts(model)
        return sizes, (*times, 1_773_403_200.0), gaps


def test_classes_from_the_day_sums_equal_those_from_the_rows(tmp_path: Path) -> None:
    """Across a price change, the long-context threshold and every gap bucket: the same classes."""
    rules = MetricsOptions().counting(RateTable.load())
    model = "claude-opus-4-6"
    sizes, times, _gaps = rules.cuts(model)
    assert sizes and times, "the model must have a long-context price and a price change"
    change, limit = times[0], int(sizes[0])
    steps = [0, 60, 120, 121, 200, 300, 301, 1000, 3600, 3601, 5000, 90]
    contexts = [limit - 1, limit, limit + 1, 2 * limit, 1000, limit]
    requests, ts = [], change - 9000.0
    for i, step in enumerate(steps * 3):
        ts += step
        source = Source.SUBAGENT if i % 5 == 4 else Source.MAIN
        requests.append(Request(f"k{i}", ts, model, f"s{i // 12}", "/p", source,
                                contexts[i % len(contexts)], 10 + i, 0, 0, 0, web_search=i % 2))
    ledger = ledger_of(tmp_path / "l.db", requests)
    db = ledger._db  # the connection the end uses

    def norm(rows: Any) -> list[Any]:
        return sorted((m, c, f, last, tuple(v)) for m, c, f, last, v in rows)

    of_rows = norm(classes._classes_of_rows(db, rules))
    of_days = classes._classes_of_days(db, rules)
    assert of_days is not None and norm(of_days) == of_rows
    assert {c[1].period for c in of_rows} == {0, 1} and {c[1].long for c in of_rows} == {0, 1}
    assert {c[1].gap for c in of_rows} == {"", "first", "lt_5m", "5m_to_1h", "gt_1h"}
    stored = norm(ledger.rollups().counts)  # counted request by request as the rows came
    assert [r[:2] + r[4:] for r in stored] == [r[:2] + r[4:] for r in of_rows]
    # A cut inside a day: the day sums give way to the rows.
    off = _OffMidnight(rules)
    assert classes._classes_of_days(db, off) is None
    assert norm(classes.count_classes(db, off)) == norm(
        classes._classes_of_rows(db, off))
