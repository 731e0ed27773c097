"""A metrics projection under test: a fresh registry, a fixed clock, requests or a ledger."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from exporter.ledger.store import Ledger
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import RateTable
from exporter.records import Parsed, Request, Source
from tests.support.clock import Clock
from tests.support.ledgers import ledger_of

T0 = 1_790_000_000.0  # the tests' "now", give or take a few minutes
# The projected spend's series the test projections expose (serve computes them from the
# ledger: exporter.projections.budget_pace.PaceGauge, tested in tests/test_budget_pace.py).
PROJECTED = [(412.5, {"period": "month"}), (18.25, {"period": "day"})]


def req(key: str, ts: float, *, session: str = "s1", source: Source = Source.MAIN,
        model: str = "claude-opus-4-6", output: int = 100, read: int = 10_000,
        w5: int = 500, w1h: int = 0, project: str = "/home/u/app") -> Request:
    """A request with small, distinct numbers."""
    return Request(key, ts, model, session, project, source, 5, output, read, w5, w1h)


def options(**opts: object) -> MetricsOptions:
    """The test options (budgets, version) with overrides."""
    return MetricsOptions(budgets={"day": 20.0, "month": 400.0}, version="test",
                          **opts)  # type: ignore[arg-type]


def projection(clock: Clock | None = None, **opts: object) -> tuple[Projection, CollectorRegistry]:
    """A projection on a fresh registry with a fixed clock."""
    registry = CollectorRegistry()
    c = clock or Clock(T0 + 100)
    return Projection(RateTable.load(), options(**opts), registry, clock=c,
                      files_watched=lambda: 3, budget_projected=lambda: PROJECTED), registry


def loaded(tmp: Path, requests: Sequence[Request], clock: Clock | None = None,
           **opts: object) -> tuple[Projection, CollectorRegistry, Ledger]:
    """A projection started from a ledger holding ``requests`` (all settled)."""
    c = clock or Clock(T0 + 100)
    ledger = ledger_of(tmp / "ledger.sqlite3", requests, options=options(**opts), clock=c)
    proj, registry = projection(c, **opts)
    proj.load(ledger)
    return proj, registry, ledger


def batch(ledger: Ledger, *reqs: Request) -> Parsed:
    """Apply some request lines to ``ledger`` as one batch; return what was parsed."""
    parsed = Parsed()
    for r in reqs:
        parsed.add(r)
    return parsed


# The history of tests/golden/exposition.txt (tests/test_metrics.py; tests/test_codex_metrics.py
# mixes Codex turns into it).
GOLDEN_HISTORY = [
    # Two requests attributed (docs/figures.md, "Attribution"): the attributed_* families.
    req("a", T0), req("b", T0 + 10, output=300)._replace(skill="conventional-commit",
                                                         effort="high"),
    req("c", T0 + 400, w5=9_000, read=1_000),
    req("d", T0 + 5_000, w1h=20_000, read=0),
    req("x", T0 + 20, source=Source.SUBAGENT, model="claude-haiku-4-5-20251001")._replace(
        agent="Explore", mcp_server="github", effort="high"),
    req("u", T0 + 30, session="s2", model="claude-nova-9"),
]
