"""The plan metric families: registered on a real OpenTelemetry meter, exposed, documented."""

from __future__ import annotations

import re

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.ingest import spool
from exporter.ledger import plan_store as store
from exporter.projections.plan.estimate import Estimate
from exporter.projections.plan.gauges import (
    ALL_FAMILIES,
    PLAN_FAMILIES,
    FiguresCache,
    observers,
    register,
)
from exporter.projections.plan.pace import LIMIT_AHEAD, ON_TRACK, Pace
from exporter.projections.plan.windows import PlanFigures, WindowFigures
from tests.support.paths import ROOT

DOC = ROOT / "docs" / "plan-limits.md"

FIGURES = PlanFigures(
    windows={
        "five_hour": WindowFigures(0.42, 1_790_018_000.0, 3, Estimate(2.4, 391, 5, 100.0, 41.7),
                                   Pace(LIMIT_AHEAD, 130.0, 1_790_010_000.0, 20.0)),
        "seven_day": WindowFigures(0.17, 1_790_600_000.0, 0, Estimate(None, 0, 0, 0.0, 0.0),
                                   Pace(ON_TRACK, 61.0, None, 0.5)),
    },
    samples=1234,
    sample_age_seconds=4.5,
    context_used_ratio=0.61,
    failures={**dict.fromkeys(spool.FAILURE_REASONS, 0), "not_json": 2},
    rejected=dict.fromkeys(store.REJECT_REASONS, 0),
)


def expose(figures: PlanFigures) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Register the families on a real meter and parse the Prometheus exposition."""
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False,
                                    registry=registry)
    provider = MeterProvider(metric_readers=[reader])
    register(provider.get_meter("test"), "claude_code", lambda: figures)
    text = generate_latest(registry).decode()
    provider.shutdown()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_families_expose_the_figures_under_their_names() -> None:
    """Every family shows up with its exposed name, labels and the figure's value."""
    got = expose(FIGURES)
    five, seven = (("window", "five_hour"),), (("window", "seven_day"),)
    assert got["claude_code_plan_window_used_ratio"] == {five: 0.42, seven: 0.17}
    assert got["claude_code_plan_window_resets_at_seconds"][five] == 1_790_018_000.0
    assert got["claude_code_plan_window_samples_total"] == {(): 1234.0}
    assert got["claude_code_plan_windows_exhausted_total"] == {five: 3.0, seven: 0.0}
    assert got["claude_code_plan_sample_age_seconds"] == {(): 4.5}
    assert got["claude_code_context_window_used_ratio"] == {(): 0.61}
    # No estimate for the weekly window yet: its series is absent, not 0.
    assert got["claude_code_plan_window_usd_per_percent"] == {five: 2.4}
    assert got["claude_code_plan_window_usd_per_percent_pairs"] == {five: 391.0}
    # On track: a projection, and no time of the limit.
    assert got["claude_code_plan_window_projected_ratio"] == {five: 1.3, seven: 0.61}
    assert got["claude_code_plan_window_limit_at_seconds"] == {five: 1_790_010_000.0}
    failures = got["claude_code_exporter_statusline_failures_total"]
    assert failures[(("reason", "not_json"),)] == 2.0
    assert len(failures) == len(spool.FAILURE_REASONS)
    assert {fam.exposed() for fam in PLAN_FAMILIES} <= set(got)


def test_no_sample_yet_means_no_plan_series() -> None:
    """Before the first status-line sample: no window, age or context series; counters at 0."""
    got = expose(PlanFigures(failures=dict.fromkeys(spool.FAILURE_REASONS, 0)))
    assert "claude_code_plan_window_used_ratio" not in got
    assert "claude_code_plan_sample_age_seconds" not in got
    assert got["claude_code_plan_window_samples_total"] == {(): 0.0}


def test_cache_computes_once_per_ttl() -> None:
    """One scrape reads ten families but computes the figures once."""
    calls: list[int] = []
    clock = [0.0]

    def compute() -> PlanFigures:
        calls.append(1)
        return FIGURES

    cache = FiguresCache(compute, lambda: clock[0], ttl=1.0)
    sources = observers(cache.get)
    assert set(sources) == {fam.name for fam in ALL_FAMILIES}
    for source in sources.values():
        list(source())
    assert len(calls) == 1
    clock[0] = 1.5
    list(sources["plan_window_used_ratio"]())
    assert len(calls) == 2


def doc_table() -> dict[str, tuple[str, str]]:
    """The metric table of docs/plan-limits.md: exposed name → (type, labels)."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `(claude_code_[a-z0-9_]+)` \| (gauge|counter) \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3).strip())
    return rows


def test_docs_list_every_family_with_type_and_labels() -> None:
    """docs/plan-limits.md names each family, its type and its labels (and nothing else)."""
    table = doc_table()
    assert set(table) == {fam.exposed() for fam in ALL_FAMILIES}
    for fam in ALL_FAMILIES:
        kind, labels = table[fam.exposed()]
        assert kind == fam.kind, fam.name
        assert set(re.findall(r"`([a-z_]+)`", labels)) == set(fam.labels), (fam.name, labels)


def test_catalogue_names_are_kept() -> None:
    """The names the metric catalogue fixed for this issue are the ones exposed."""
    names = {fam.exposed() for fam in PLAN_FAMILIES}
    catalogue = {"claude_code_plan_window_used_ratio", "claude_code_plan_window_resets_at_seconds",
                 "claude_code_plan_window_samples_total", "claude_code_plan_window_usd_per_percent",
                 "claude_code_context_window_used_ratio"}
    assert catalogue <= names
