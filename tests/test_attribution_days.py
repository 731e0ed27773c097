"""Attribution day sums (exporter.ledger.attr_days): kept with the rows, read by views and /metrics.

The table must always equal a GROUP BY of the requests (after incremental
batches, upgraded rows, a first pass, a migration), and the views and the
families' start-up must give the figures the requests give, whole days from
the table and partial days from the rows.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3 as stdlib_sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from exporter.ledger import attr_days as attribution_days
from exporter.ledger import slots
from exporter.ledger.store import Ledger
from exporter.projections import attribution
from exporter.projections.attributed import Attributed, Names
from exporter.projections.class_prices import ClassPrices
from exporter.projections.periods import Range, resolve_zone
from exporter.projections.pricing import RateTable
from exporter.projections.selection import Selection
from exporter.projections.views import Options
from exporter.records import Request, Source
from tests.support.ledgers import ROOT, appearances, ledger_of
from tests.support.projection import T0, batch, req
from tests.support.scan import counting_ledger

DAY = 86_400
SKILLS = ("", "tdd", "conventional-commit")
# What the table must hold: the same GROUP BY as attribution_days, written independently.
TRUTH = """
WITH v AS (SELECT CAST(CAST(r.ts / 300 AS INTEGER) / 288 AS INTEGER) AS d, k.id AS key,
  r.roots AS ro, r.* FROM requests r JOIN slot_sessions s ON s.session = r.session
  JOIN slot_keys k ON k.sid = s.id AND k.project = r.project AND k.model = r.model
  AND k.source = r.source AND k.service_tier = r.service_tier
  AND k.inference_geo = r.inference_geo AND k.speed = r.speed AND k.long = {level})
SELECT * FROM (
""" + " UNION ALL ".join(
    f"SELECT d, {i + pair}, {c}, {'effort' if pair else chr(39) * 2}, key, ro, count(*), "
    "sum(input), sum(output), sum(cache_read), sum(cache_write_5m), sum(cache_write_1h), "
    "sum(web_search), min(ts), max(ts) FROM v GROUP BY 1, 3, 4, 5, 6"
    for i, c in enumerate(("skill", "plugin", "mcp_server", "agent")) for pair in (0, 5)
) + """ UNION ALL SELECT d, 4, effort, '', key, ro, count(*), sum(input), sum(output),
  sum(cache_read), sum(cache_write_5m), sum(cache_write_1h), sum(web_search), min(ts), max(ts)
  FROM v WHERE effort != '' GROUP BY 1, 3, 5, 6) ORDER BY 1, 2, 3, 4, 5, 6"""


def truth_and_table(ledger: Ledger) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The table's rows, and the GROUP BY of the requests they must equal."""
    level = slots.level_sql(slots.read_thresholds(ledger.read))
    want = ledger.read(TRUTH.format(level=level))
    got = ledger.read("SELECT * FROM attr_days ORDER BY 1, 2, 3, 4, 5, 6")
    return want, got


def attributed_requests(n: int, seed: int, days: int = 4) -> list[Request]:
    """``n`` requests over ``days`` days, two sessions, mixed attribution and price classes."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base = req(f"k{i}", T0 + rng.uniform(0, days * DAY), session=f"s{i % 2}",
                   output=rng.randint(1, 900), model=rng.choice(("claude-opus-4-6",
                                                                  "claude-sonnet-4-5")))
        out.append(base._replace(skill=rng.choice(SKILLS), plugin=rng.choice(("", "entire")),
                                 mcp_server=rng.choice(("", "github")),
                                 agent=rng.choice(("", "Explore")),
                                 effort=rng.choice(("", "low", "high")),
                                 source=rng.choice((Source.MAIN, Source.MAIN, Source.SUBAGENT)),
                                 speed=rng.choice(("", "fast"))))
    return out


def apply(ledger: Ledger, reqs: Sequence[Request]) -> None:
    """One incremental batch of ``reqs``."""
    ledger.apply(batch(ledger, *reqs), [], 0, appearances(reqs))


def test_table_equals_a_group_by_after_batches_upgrades_and_a_first_pass(tmp_path: Path) -> None:
    """Incremental batches, streaming upgrades (a value arriving later), a first pass: exact."""
    reqs = attributed_requests(120, seed=3)
    ledger = ledger_of(tmp_path / "inc.db", reqs[:60])
    want, got = truth_and_table(ledger)
    assert got == want and len(got) > 100
    apply(ledger, reqs[60:100])
    # Streaming splits: a later copy of a request names its MCP server, or moves a day on.
    late = [r._replace(ts=r.ts + 1, mcp_server="playwright") for r in reqs[:10]]
    apply(ledger, [*late, *reqs[100:]])
    moved = [reqs[20]._replace(ts=reqs[20].ts - 2 * DAY, skill="tdd")]  # an earlier copy
    apply(ledger, moved)
    want, got = truth_and_table(ledger)
    assert got == want
    blank = sum(not r.mcp_server for r in reqs[:10])  # a blank never hides a name: only these
    assert ledger.read("SELECT sum(n) FROM attr_days WHERE kind = 2 AND value = 'playwright'"
                       ) == [(blank,)] and blank
    ledger.close()
    raw = counting_ledger(tmp_path / "raw.db")
    with raw.bulk(3, raw=True):
        for part in (reqs[:50], reqs[50:], late, moved):
            raw.apply(batch(raw, *part), [], 0, appearances(part))
        assert not attribution_days.current(raw.read)  # a raw pass: stale until its end
    want_raw, got_raw = truth_and_table(raw)
    assert got_raw == want_raw and len(got_raw) == len(got)
    assert attribution_days.current(raw.read)
    raw.close()


def test_an_existing_ledger_sums_the_table_once_at_open(tmp_path: Path) -> None:
    """A ledger of the previous slot layout (no table) is summed at its next open."""
    ledger = ledger_of(tmp_path / "l.db", attributed_requests(50, seed=4))
    ledger.close()
    con = stdlib_sqlite3.connect(tmp_path / "l.db")
    con.execute("DROP TABLE attr_days")
    con.execute("DELETE FROM slot_meta WHERE name = 'attr_days'")
    con.execute("UPDATE slot_meta SET value = '4' WHERE name = 'version'")
    con.commit()
    con.close()
    again = counting_ledger(tmp_path / "l.db")
    want, got = truth_and_table(again)
    assert got == want and got
    assert attribution_days.current(again.read)
    again.close()


def logged(ledger: Ledger, log: list[str]) -> Any:
    """``ledger.read`` that notes each query in ``log``."""
    def read(sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        log.append(sql)
        return ledger.read(sql, params)
    return read


def selection(ledger: Ledger, read: Any, rng: Range, *, days: bool = True,
              **filters: Any) -> Selection:
    """A report's selection over the whole ledger (``days=False``: no day sums, the rows)."""
    return Selection(read, "requests", rng, slots=True, days=days,
                     slot_thresholds=slots.read_thresholds(ledger.read), **filters)


@pytest.mark.parametrize("by", attribution.BREAKDOWNS)
def test_views_on_a_zone_with_partial_days_equal_the_rows(tmp_path: Path, by: str) -> None:
    """A non-UTC zone and --since/--until inside days: the table's days + edge rows = the rows."""
    ledger = ledger_of(tmp_path / "l.db", attributed_requests(400, seed=5, days=6))
    prices = ClassPrices.of(RateTable.load())
    zone = resolve_zone("Asia/Kolkata")
    ranges = [Range(None, None, zone), Range(T0 + DAY + 3_723.5, T0 + 5 * DAY - 601.25, zone),
              Range(T0 + 2 * DAY + 10.0, T0 + 2 * DAY + 900.0, zone)]
    filters: list[dict[str, Any]] = [{}, {"models": ("claude-sonnet-4-5",)},
                                     {"sources": (Source.SUBAGENT,)}]
    for rng in ranges:
        for extra in filters:
            for name in attribution.VIEWS:
                log: list[str] = []
                options = Options(breakdown=True)
                days = attribution.build(name, selection(ledger, logged(ledger, log), rng,
                                                         **extra), prices, options, by)
                rows = attribution.build(name, selection(ledger, ledger.read, rng, days=False,
                                                         **extra), prices, options, by)
                assert dataclasses.astuple(days) == dataclasses.astuple(rows), (rng, extra)
                if rng.since is None or rng.until is None or rng.until - rng.since > DAY:
                    assert any("attr_days" in q for q in log)
    ledger.close()


def test_the_view_and_the_families_read_the_table(tmp_path: Path) -> None:
    """Whole days come from the table: a value changed there shows in the view and at start-up."""
    ledger = ledger_of(tmp_path / "l.db", attributed_requests(40, seed=6))
    ledger.close()
    con = stdlib_sqlite3.connect(tmp_path / "l.db")
    con.execute("UPDATE attr_days SET value = 'from-the-table' WHERE value = 'tdd'")
    con.commit()
    con.close()
    ledger = counting_ledger(tmp_path / "l.db")
    prices = ClassPrices.of(RateTable.load())
    rng = Range(None, None, resolve_zone("UTC"))
    view = attribution.build("skill", selection(ledger, ledger.read, rng), prices, Options())
    assert "from-the-table" in {row.label for row in view.rows}
    families = Attributed(RateTable.load(), Names()).load(ledger.read, "requests")
    assert ("attributed_requests", (("kind", "skill"), ("name", "from-the-table"))) in families
    ledger.close()


def test_families_start_from_the_table_as_from_the_rows(tmp_path: Path) -> None:
    """The start-up sums from the table equal those from the requests, scoped or not."""
    ledger = ledger_of(tmp_path / "l.db", attributed_requests(300, seed=7))
    scopes = [(ledger.scope(roots), ledger.scope_filter(roots)) for roots in ([ROOT], ["/x"])]
    from_table = [Attributed(RateTable.load(), Names()).load(ledger.read, *s) for s in scopes]
    con = stdlib_sqlite3.connect(tmp_path / "l.db")
    con.execute("DELETE FROM slot_meta WHERE name = 'attr_days'")  # stale: the rows answer
    con.commit()
    con.close()
    assert not attribution_days.current(ledger.read)
    from_rows = [Attributed(RateTable.load(), Names()).load(ledger.read, *s) for s in scopes]
    assert from_table == from_rows
    assert from_table[0] and not from_table[1]  # nothing was found under /x
    ledger.close()
