"""Cardinality: every family over the worst case the label caps allow sums to the truth.

The worst case is a history with more models and projects than the caps,
from every source, with every token type, cache write and web search, so that
every (model, project, source) label set of the catalogue exists. Each family
of the exposition (the catalogue's and both compatibility modes') is summed and
compared with the truth computed from the requests alone; no series may carry
the SDK's ``otel_metric_overflow`` label, and no family may have more label
sets than :mod:`exporter.projections.cardinality` says it can.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from math import isclose
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.projections import cardinality, instruments
from exporter.projections.cardinality import SERIES_BUDGET, Caps
from exporter.projections.compat import genai_histogram as genai
from exporter.projections.compat import native
from exporter.projections.compat.history import FAMILIES as COMPAT_FAMILIES
from exporter.projections.counting import TOKEN_FIELDS, USD_QUANTUM
from exporter.projections.labels import MAX_MODELS, MAX_PROJECTS, OTHER
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import RateTable
from exporter.records import Parsed, Request, Source
from tests.support.exposition import families
from tests.support.ledgers import appearances, ledger_of
from tests.support.net import free_port
from tests.support.paths import ROOT

T0 = 1_790_000_000.0
NS = "claude_code"
GOLDEN = ROOT / "tests" / "golden"
#: Priced models first (so that the named ones are priced), then two nobody prices.
PRICED = ("claude-opus-4-6", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5",
          "claude-opus-4-1", "claude-sonnet-4-0", "claude-opus-4-0", "claude-3-7-sonnet",
          "claude-3-5-sonnet", "claude-3-5-haiku", "claude-3-haiku", "claude-3-opus",
          "claude-sonnet-4-6", "claude-opus-4-7", "claude-sonnet-5", "claude-opus-5",
          "claude-haiku-5-5", "claude-fable-5")
UNPRICED = ("claude-nova-9", "gateway/some-other-model")
MODELS = PRICED + UNPRICED
PROJECTS = tuple(f"/work/p{j:03d}" for j in range(MAX_PROJECTS + 4))
SOURCES = tuple(Source)
#: The issue's three sources (it predates advisor consultations).
ISSUE_SOURCES = (Source.MAIN, Source.SUBAGENT, Source.COMPACTION)
COMPAT = ("native", "genai")


def worst_history() -> list[Request]:
    """One request per model x project x source, every count non-zero, small prompts.

    Ordered by model, so the first :data:`MAX_MODELS` models (all priced) are
    the named ones and the rest are ``other``; every project is used by every
    model, so the first :data:`MAX_PROJECTS` projects are named.
    """
    out: list[Request] = []
    for m, model in enumerate(MODELS):
        for p, project in enumerate(PROJECTS):
            for source in SOURCES:
                i = len(out)
                out.append(Request(
                    f"k{i}", T0 + i, model, f"s{m}-{p}-{int(source)}", project, source,
                    1 + i % 7, 100 + i % 13, 1_000 + i % 101, 50 + i % 11, 20 + i % 5,
                    web_search=1 + i % 3))
    return out


class Truth:
    """The figures the exposition must add up to, from the requests alone (no labels)."""

    def __init__(self, requests: Sequence[Request], pricing: RateTable) -> None:
        """Sum the requests by model (and project) and price each model's sums once."""
        self.requests = len(requests)
        self.tokens: dict[str, int] = defaultdict(int)
        self.by_model: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.by_project: dict[str, int] = defaultdict(int)
        self.context = 0
        # The per-request histograms leave advisor consultations out (docs/metrics.md).
        own = [r for r in requests if r.source is not Source.ADVISOR]
        self.own_requests = len(own)
        self.own_context = sum(r.context for r in own)
        self.own_output = sum(r.output for r in own)
        for r in requests:
            counts = dict(zip(TOKEN_FIELDS, (r.input, r.output, r.cache_read, r.cache_write_5m,
                                             r.cache_write_1h), strict=True))
            counts["web_search"] = r.web_search
            counts["requests"] = 1
            for kind, count in counts.items():
                self.tokens[kind] += count
                self.by_model[r.model][kind] += count
            self.by_project[os.path.basename(r.project)] += r.output
            self.context += r.context
        self.cost: dict[str, float] = defaultdict(float)
        self.savings = self.premium = 0.0
        self.unpriced = 0
        for model, n in self.by_model.items():
            rates = pricing.rates(model)
            if rates is None:
                self.unpriced += sum(n[t] for t in TOKEN_FIELDS)
                continue
            per = rates.cost(*(n[t] for t in TOKEN_FIELDS), web_search=n["web_search"])
            for kind, usd in per.items():
                self.cost[kind] += usd
            self.savings += n["cache_read"] * (rates.input - rates.cache_read) * 1e-6
            self.premium += (n["cache_write_5m"] * (rates.cache_write_5m - rates.input)
                             + n["cache_write_1h"] * (rates.cache_write_1h - rates.input)) * 1e-6


def scrape(registry: CollectorRegistry) -> tuple[str, dict[str, Any]]:
    """The exposition text and its families, parsed by prometheus_client."""
    text = generate_latest(registry).decode()
    return text, families(text)


def summed(fams: Mapping[str, Any], family: str, sample: str | None = None,
           **match: str) -> float:
    """Sum of a family's samples (``sample``: its name, default ``<family>_total``)."""
    name = sample or f"{family}_total"
    return float(sum(s.value for s in fams[family].samples
                     if s.name == name and all(s.labels.get(k) == v for k, v in match.items())))


def label_sets(fams: Mapping[str, Any], family: str) -> set[tuple[tuple[str, str], ...]]:
    """The distinct label sets of a family (histogram buckets' ``le`` left out)."""
    return {tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            for s in fams[family].samples if not s.name.endswith("_created")}


def usd_close(got: float, want: float) -> bool:
    """Equal but for the quantum each class's sample is rounded to (one class per request here)."""
    return isclose(got, want, rel_tol=0, abs_tol=len(MODELS) * len(PROJECTS) * len(SOURCES)
                   * USD_QUANTUM)


def worst_projection(tmp: Path, requests: Sequence[Request],
                     registry: CollectorRegistry) -> Projection:
    """Two thirds of ``requests`` loaded from a ledger at start-up, the rest in live batches."""
    opts = MetricsOptions(compat=COMPAT, version="test")
    cut = 2 * len(requests) // 3
    ledger = ledger_of(tmp / "l.db", requests[:cut], options=opts)
    proj = Projection(RateTable.load(), opts, registry, clock=lambda: T0)
    proj.load(ledger)
    for at in range(cut, len(requests), 500):  # the rest as a live daemon takes it
        part = requests[at:at + 500]
        parsed = Parsed()
        for r in part:
            parsed.add(r)
        proj.apply(ledger.apply(parsed, [], 0, appearances(part)))
    proj.apply(ledger.settle(force=True))
    return proj


def test_every_family_over_the_worst_case_sums_to_the_truth(tmp_path: Path) -> None:
    """Models and projects past their caps, every source: each family's sums equal the truth."""
    requests = worst_history()
    truth = Truth(requests, RateTable.load())
    registry = CollectorRegistry()
    worst_projection(tmp_path, requests, registry)
    text, fams = scrape(registry)

    assert "otel_metric_overflow" not in text
    assert summed(fams, f"{NS}_requests") == truth.requests
    for kind in TOKEN_FIELDS:
        assert summed(fams, f"{NS}_tokens", type=kind) == truth.tokens[kind], kind
        assert usd_close(summed(fams, f"{NS}_cost_usd", type=kind), truth.cost[kind]), kind
    assert usd_close(summed(fams, f"{NS}_cost_usd", type="web_search"), truth.cost["web_search"])
    assert summed(fams, f"{NS}_unpriced_tokens") == truth.unpriced
    assert usd_close(summed(fams, f"{NS}_cache_savings_usd"), truth.savings)
    assert usd_close(summed(fams, f"{NS}_cache_write_premium_usd"), truth.premium)
    assert summed(fams, f"{NS}_web_search_requests") == truth.tokens["web_search"]
    main = sum(1 for r in requests if r.source is Source.MAIN)
    assert summed(fams, f"{NS}_requests_after_gap") == main
    assert summed(fams, f"{NS}_prompt_tokens_after_gap", type="input") == sum(
        r.input for r in requests if r.source is Source.MAIN)
    for hist, total in ((f"{NS}_request_context_tokens", truth.own_context),
                        (f"{NS}_request_output_tokens", truth.own_output)):
        assert summed(fams, hist, f"{hist}_count") == truth.own_requests, hist
        assert summed(fams, hist, f"{hist}_sum") == total, hist
    for arch in ("mla", "gqa"):
        assert summed(fams, f"{NS}_request_kv_cache_bytes", f"{NS}_request_kv_cache_bytes_count",
                      arch=arch) == truth.own_requests
    # The compatibility families: Claude Code's counters and the GenAI histogram.
    tokens, cost = COMPAT_FAMILIES[native.TOKEN_USAGE], COMPAT_FAMILIES[native.COST_USAGE]
    assert summed(fams, tokens) == sum(truth.tokens[t] for t in TOKEN_FIELDS)
    assert summed(fams, tokens, type="cacheRead") == truth.tokens["cache_read"]
    assert usd_close(summed(fams, cost), sum(truth.cost.values()))  # web searches included
    gen = COMPAT_FAMILIES[genai.NAME]
    assert summed(fams, gen, f"{gen}_count", gen_ai_token_type="input") == truth.own_requests
    assert summed(fams, gen, f"{gen}_sum", gen_ai_token_type="input") == truth.own_context
    assert summed(fams, gen, f"{gen}_sum", gen_ai_token_type="output") == truth.own_output
    _check_other(fams, truth)
    _check_series(fams, Caps("basename", 2))


def _check_other(fams: Mapping[str, Any], truth: Truth) -> None:
    """Named models and projects carry exactly their own figures; ``other`` carries the rest."""
    family = f"{NS}_tokens"
    models = {s.labels["model"] for s in fams[family].samples}
    assert len(models) == MAX_MODELS + 1 and OTHER in models
    assert models - {OTHER} == set(MODELS[:MAX_MODELS])
    for model in MODELS[:MAX_MODELS]:
        assert summed(fams, family, model=model, type="output") == \
            truth.by_model[model]["output"], model
    assert summed(fams, family, model=OTHER, type="output") == sum(
        truth.by_model[m]["output"] for m in MODELS[MAX_MODELS:])
    projects = {s.labels["project"] for s in fams[family].samples}
    named = {os.path.basename(p) for p in PROJECTS[:MAX_PROJECTS]}
    assert projects == named | {OTHER}
    for project in named:
        assert summed(fams, family, project=project, type="output") == truth.by_project[project]
    assert summed(fams, family, project=OTHER, type="output") == sum(
        truth.by_project[os.path.basename(p)] for p in PROJECTS[MAX_PROJECTS:])


def _check_series(fams: Mapping[str, Any], caps: Caps) -> None:
    """Every family has its declared labels and at most its worst case of label sets.

    The usage families reach it: the history is the worst case the caps allow.
    """
    worst = caps.worst_cases()
    dims = caps.families()
    names = {**{f"{NS}_{n}": n for n in worst}, **{v: k for k, v in COMPAT_FAMILIES.items()}}
    reached = {"requests", "tokens", "cost_usd", "cache_savings_usd", "cache_write_premium_usd",
               "web_search_requests", "request_context_tokens", "request_output_tokens",
               native.TOKEN_USAGE, native.COST_USAGE, genai.NAME}
    for family in fams:
        name = names[family]
        sets = label_sets(fams, family)
        assert len(sets) <= worst[name], family
        if name in reached:
            assert len(sets) == worst[name], family
        want = {d.label.replace(".", "_") for d in dims[name]}
        assert all({k for k, _ in s} == want for s in sets), family


def test_the_issue_history_sums_to_the_truth(tmp_path: Path) -> None:
    """40 projects x 6 models x 3 sources, 1,440 requests: output tokens are 144,000."""
    requests = [Request(f"k{i}", T0 + i, PRICED[m], f"s{p}", f"/w/proj{p}", source, 5, 100,
                        1_000, 50, 0)
                for p in range(40) for m in range(6) for source in ISSUE_SOURCES for i in [
                    len(ISSUE_SOURCES) * (6 * p + m) + int(source)]]
    requests += [r._replace(key=r.key + "b", ts=r.ts + 5_000) for r in requests]
    registry = CollectorRegistry()
    proj = Projection(RateTable.load(), MetricsOptions(), registry, clock=lambda: T0)
    proj.load(ledger_of(tmp_path / "l.db", requests))
    text, fams = scrape(registry)
    assert len(requests) == 1_440
    assert summed(fams, f"{NS}_tokens", type="output") == 144_000  # 80,000 before the fix
    assert "otel_metric_overflow" not in text
    assert len(label_sets(fams, f"{NS}_tokens")) == 40 * 6 * 3 * 5


def test_the_caps_fit_the_budget_and_every_instrument_has_a_limit() -> None:
    """Each SDK limit is above its family's worst case; the whole table fits the budget."""
    for policy, archs in (("basename", 2), ("none", 2), ("hash", 8)):
        caps = Caps(policy, archs)
        worst, limits = caps.worst_cases(), caps.limits()
        assert all(limits[n] > w for n, w in worst.items())
        assert sum(worst.values()) <= SERIES_BUDGET, (policy, archs)
    declared = set(Caps("basename", 2).families())
    catalogue = {*instruments.COUNTERS, *instruments.HISTOGRAMS, *instruments.GAUGES}
    assert declared == catalogue | {native.TOKEN_USAGE, native.COST_USAGE, genai.NAME}
    # Above the SDK's default of 2,000: only explicit limits let the usage families be whole.
    assert Caps("basename", 2).worst_cases()["cost_usd"] > 2_000
    assert all(n == cardinality.FOREIGN_LIMIT for n in cardinality.reader_limits().values())


def test_an_instrument_without_a_declared_limit_is_refused() -> None:
    """Building the instruments without a family's limit fails instead of using the SDK's."""
    limits = Caps("basename", 2).limits()
    del limits["tokens"]
    with pytest.raises(KeyError, match="tokens"):
        instruments.build(NS, CollectorRegistry(), {}, limits=limits)
    with pytest.raises(KeyError, match="no cardinality limit"):
        instruments.build(NS, CollectorRegistry(), {}, limits=Caps("basename", 2).limits(),
                          aggregations={"elsewhere": instruments.SeededHistogramAggregation()})


def test_golden_expositions_carry_no_overflow_label_and_only_declared_families() -> None:
    """No golden exposition has ``otel_metric_overflow``; each of their families is declared."""
    declared = {f"{NS}_{n}" for n in Caps("basename", 2).families() if n not in COMPAT_FAMILIES}
    declared |= set(COMPAT_FAMILIES.values())
    goldens = sorted(GOLDEN.glob("exposition*.txt"))
    assert len(goldens) >= 4
    for path in goldens:
        text = path.read_text()
        assert "otel_metric_overflow" not in text, path.name
        if path.name == "exposition_plan.txt":
            continue  # the plan families: their own meter (cardinality.FOREIGN_LIMIT)
        for family in re.findall(r"^# TYPE (\S+) ", text, re.M):
            assert family.removesuffix("_total") in declared, (path.name, family)


def test_an_sdk_switched_off_by_the_environment_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_SDK_DISABLED=true would serve an empty exposition: the projection refuses it."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    with pytest.raises(instruments.MetricsDisabledError, match="OTEL_SDK_DISABLED"):
        Projection(RateTable.load(), MetricsOptions(), CollectorRegistry())


def test_serve_says_why_it_will_not_run_with_the_sdk_off(tmp_path: Path) -> None:
    """``serve`` under OTEL_SDK_DISABLED=true exits with a configuration error naming it."""
    (tmp_path / "data").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_SDK_DISABLED": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--data-dir", str(tmp_path / "data"),
         "--state-dir", str(tmp_path / "state"), "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, check=False, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "OTEL_SDK_DISABLED" in proc.stderr
