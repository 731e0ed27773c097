"""Live rows wait outside the value indexes and are folded in by the thousand, figures exact."""

from __future__ import annotations

import random
from pathlib import Path

from exporter.ledger import slots, unindexed
from exporter.ledger.store import Ledger
from exporter.projections.percentiles import Histograms, kth, percentile
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.selection import of_ledger
from exporter.records import Appearance, Parsed, Request
from exporter.sqlite import sqlite3
from tests.support.ledgers import ledger_value
from tests.support.records import request
from tests.support.report_ledgers import ROOT

START = 1_780_000_000.0
PERCENTS = (1, 50, 90, 99, 100)
COUNT_WAITING = f"SELECT count(*) FROM requests WHERE {unindexed.WAITING}"


def _batch(ledger: Ledger, reqs: list[Request], file: str) -> None:
    """One incremental batch: the requests, all in one transcript file."""
    parsed = Parsed()
    for req in reqs:
        parsed.add(req)
    ledger.apply(parsed, [], 0, [Appearance(f"{ROOT}/p/{file}.jsonl", ROOT, file,
                                            tuple(r.key for r in reqs))])


def _requests(n: int, seed: int, first: int) -> list[Request]:
    """``n`` requests of one session with spread prompt and output sizes, a second apart."""
    rng = random.Random(seed)
    return [request(f"k{first + i}", START + first + i, session=f"s{seed}",
                    input=rng.randrange(50), cache_read=int(rng.lognormvariate(10, 1.5)),
                    output=int(rng.lognormvariate(5, 2))) for i in range(n)]


def _figures(ledger: Ledger) -> list[object]:
    """Context and output percentiles of the whole ledger, by histograms and by walks."""
    sel = of_ledger(ledger.read, ledger.scope(None), Range(None, None, UTC_ZONE), None)
    assert sel.unindexed
    hist = Histograms.of(sel)
    assert hist is not None
    n = ledger.count()
    return [hist.ranks(slots.CONTEXT_HIST, PERCENTS), hist.ranks(slots.OUTPUT_HIST, PERCENTS),
            [kth(sel, "context", p=p, n=n) for p in PERCENTS],
            [kth(sel, "output", p=p, n=n) for p in PERCENTS]]


def test_rows_wait_until_a_fold_and_the_figures_never_move(tmp_path: Path) -> None:
    """Batches' rows wait until FOLD_ROWS do, then all go in at once; percentiles stay exact."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rows: list[Request] = []
    for seed, n in enumerate((700, 700, unindexed.FOLD_ROWS - 1401), start=1):
        batch = _requests(n, seed, len(rows))
        _batch(ledger, batch, f"f{seed}")
        rows += batch
        assert ledger_value(path, COUNT_WAITING) == len(rows)
    contexts = sorted(r.input + r.cache_read for r in rows)
    outputs = sorted(r.output for r in rows)
    want = [[percentile(contexts, p) for p in PERCENTS], [percentile(outputs, p) for p in PERCENTS]]
    assert _figures(ledger) == want * 2
    last = _requests(1, 9, len(rows))
    _batch(ledger, last, "f9")  # the FOLD_ROWS-th waiting row: every one goes in
    rows += last
    assert ledger_value(path, COUNT_WAITING) == 0
    assert ledger.read("SELECT count(*) FROM requests WHERE indexed = 1") == [(len(rows),)]
    assert ledger.read("SELECT count(*) FROM requests INDEXED BY requests_output "
                       "WHERE indexed = 1 AND output >= 0") == [(len(rows),)]
    contexts = sorted(r.input + r.cache_read for r in rows)
    outputs = sorted(r.output for r in rows)
    want = [[percentile(contexts, p) for p in PERCENTS], [percentile(outputs, p) for p in PERCENTS]]
    assert _figures(ledger) == want * 2
    ledger.close()


def test_a_v5_ledger_gets_partial_value_indexes_and_keeps_its_figures(tmp_path: Path) -> None:
    """A ledger whose value indexes hold every row gets partial ones; every row stays in."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rows = _requests(300, 4, 0)
    _batch(ledger, rows, "f4")
    before = _figures(ledger)
    ledger.close()
    db = sqlite3.connect(path, isolation_level=None)  # as v5 left it: full indexes, no flag
    for name in ("requests_unindexed", "requests_context", "requests_output", "requests_gap"):
        db.execute(f"DROP INDEX {name}")
    db.execute("ALTER TABLE requests DROP COLUMN indexed")
    db.execute("CREATE INDEX requests_context ON requests (context, ts)")
    db.execute("CREATE INDEX requests_output ON requests (output, ts)")
    db.execute("CREATE INDEX requests_gap ON requests (gap, ts) "
               "WHERE source = 0 AND gap IS NOT NULL")
    db.execute("PRAGMA user_version = 5")
    db.close()
    again = Ledger(path)
    sql = dict(again.read("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    assert "indexed = 1" in sql["requests_context"] and "indexed = 1" in sql["requests_output"]
    assert "requests_unindexed" in sql
    assert again.read("PRAGMA user_version") == [(6,)]
    assert _figures(again) == before
    again.close()
