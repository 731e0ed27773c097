"""Compatibility families (docs/compat.md): Claude Code's native names and the GenAI histogram.

Three layers: the translation rules alone; the metrics projection with the
families on (golden expositions, totals, restarts); and real processes: the
daemon scraped by a real Prometheus answering dashboard 25255's own PromQL,
and the daemon pushing the GenAI histogram to an OTLP receiver.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from exporter.cli.config import load_settings
from exporter.errors import ConfigError
from exporter.ledger.store import Ledger
from exporter.projections.backfill import BackfillOptions, serve_samples, write_history
from exporter.projections.compat import genai_histogram as genai
from exporter.projections.compat import native
from exporter.projections.compat.families import Families, aggregations, check
from exporter.projections.counting import Exposure
from exporter.projections.labels import LabelPolicy
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import RateTable
from exporter.records import CountClass, HistRow, HistSeries, Parsed, Request, Source
from tests.support.ledgers import appearances, ledger_of
from tests.support.otlp import Receiver, attrs, metrics_of
from tests.support.process import Serve
from tests.support.prometheus import PromServer, prometheus_config, require_binary, static_job
from tests.support.wait import poll

GOLDEN = Path(__file__).parent / "golden"
T0 = 1_790_000_000.0
OPUS, HAIKU, SONNET = "claude-opus-4-6", "claude-haiku-4-5-20251001", "claude-sonnet-4-5"
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
NATIVE_TYPES = ("input", "output", "cacheRead", "cacheCreation")
COMPAT_FAMILY = re.compile(r"^(# (HELP|TYPE) )?(claude_code_(token|cost)_usage_|gen_ai_)")

#: Grafana dashboard 25255, "Claude Code Metrics (Prometheus)" (grafana.com/grafana/dashboards/
#: 25255), its main panels' PromQL verbatim from the published dashboard.json (dashboard
#: version 19, github.com/rockdarko/claude-code-metrics-prometheus), by panel title.
DASHBOARD_25255: dict[str, str] = {
    "Total Cost": 'sum(increase(claude_code_cost_usage_USD_total{organization_id=~"$organization",'
                  ' user_email=~"$user", model=~"$model"}[$__range]))',
    "Total Tokens": 'sum(increase(claude_code_token_usage_tokens_total{organization_id=~'
                    '"$organization", user_email=~"$user", model=~"$model"}[$__range]))',
    "Tokens by Type": 'sum(increase(claude_code_token_usage_tokens_total{organization_id=~'
                      '"$organization", user_email=~"$user", model=~"$model"}[$__range])) '
                      'by (type)',
    "Cost by Model": 'sum(increase(claude_code_cost_usage_USD_total{organization_id=~'
                     '"$organization", user_email=~"$user", model=~"$model"}[$__range])) '
                     'by (model)',
    "Cost by query_source": 'sum(increase(claude_code_cost_usage_USD_total{organization_id=~'
                            '"$organization", user_email=~"$user", model=~"$model"}'
                            '[$__range])) by (query_source)',
    "Cache hit ratio": 'sum(rate(claude_code_token_usage_tokens_total{organization_id=~'
                       '"$organization", user_email=~"$user", model=~"$model", type="cacheRead"}'
                       '[$__rate_interval])) / sum(rate(claude_code_token_usage_tokens_total'
                       '{organization_id=~"$organization", user_email=~"$user", model=~"$model",'
                       ' type=~"cacheRead|cacheCreation|input"}[$__rate_interval]))',
}


def grafana(expr: str, window: str) -> str:
    """``expr`` as Grafana sends it with every variable at "All" (the dashboard's ``.*``)."""
    for var in ("$organization", "$user", "$model"):
        expr = expr.replace(var, ".*")
    return expr.replace("$__rate_interval", window).replace("$__range", window)


def req(key: str, ts: float, *, model: str = OPUS, source: Source = Source.MAIN,
        inp: int = 5, output: int = 100, read: int = 10_000, w5: int = 500, w1h: int = 0,
        speed: str = "", session: str = "s1", project: str = "/home/u/app") -> Request:
    """A request with small, distinct numbers."""
    return Request(key, ts, model, session, project, source, inp, output, read, w5, w1h,
                   speed=speed)


HISTORY = [
    req("a", T0), req("b", T0 + 10, output=300, w1h=2_000),
    req("c", T0 + 20, source=Source.SUBAGENT, model=HAIKU, read=4_000),
    req("d", T0 + 30, source=Source.COMPACTION, read=150_000, output=9_000),
    req("e", T0 + 40, speed="fast", inp=70, output=5), req("f", T0 + 50, model="claude-nova-9"),
    req("g", T0 + 400, model=SONNET, read=0, w5=0, w1h=0, inp=3),
]


def options(*modes: str, **opts: Any) -> MetricsOptions:
    """The test options with the compat modes."""
    return MetricsOptions(version="test", compat=tuple(modes), **opts)


def loaded(tmp: Path, requests: Sequence[Request], *modes: str,
           **opts: Any) -> tuple[Projection, CollectorRegistry, Ledger]:
    """A projection with ``modes`` started from a ledger holding ``requests`` (all settled)."""
    ledger = ledger_of(tmp / "ledger.sqlite3", requests, options=options(*modes, **opts),
                       clock=lambda: T0 + 1_000)
    registry = CollectorRegistry()
    proj = Projection(RateTable.load(), options(*modes, **opts), registry,
                      clock=lambda: T0 + 1_000)
    proj.load(ledger)
    return proj, registry, ledger


def exposition(registry: CollectorRegistry) -> str:
    """The scrape text of a registry."""
    return generate_latest(registry).decode()


def counters(registry: CollectorRegistry, prefix: str) -> dict[tuple[str, tuple[Any, ...]], float]:
    """Counter samples of families starting with ``prefix``, by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in registry.collect()
            if fam.name.startswith(prefix) for s in fam.samples if not s.name.endswith("_created")}


def by(registry: CollectorRegistry, sample: str, label: str) -> dict[str, float]:
    """Sum of one sample name's values grouped by one label."""
    out: dict[str, float] = defaultdict(float)
    for fam in registry.collect():
        for s in fam.samples:
            if s.name == sample:
                out[s.labels.get(label, "")] += s.value
    return dict(out)


# ------------------------------------------------------------------ translation rules
def test_genai_bounds_are_the_conventions_and_buckets_are_inclusive() -> None:
    """The 14 boundaries 1, 4, ..., 4**13 of semconv 1.41.0; a value on a bound falls in it."""
    assert genai.BOUNDS == (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576,
                            4194304, 16777216, 67108864)
    assert (genai.bucket(0), genai.bucket(1), genai.bucket(2), genai.bucket(4)) == (0, 0, 1, 1)
    assert genai.bucket(67108864) == 13 and genai.bucket(67108865) == 14  # +Inf
    assert genai.NAME == "gen_ai.client.token.usage" and genai.UNIT == "{token}"


def test_genai_input_is_the_whole_prompt_as_the_anthropic_page_says() -> None:
    """The input measurement is input + cache read + cache creation; output is output tokens."""
    r = req("k", T0, inp=3, read=60_000, w5=1_000, w1h=500, output=77)
    (s_in, b_in, v_in), (s_out, b_out, v_out) = genai.observations(r)
    assert v_in == 3 + 60_000 + 1_000 + 500 and b_in == genai.bucket(61_503) == 8
    assert (v_out, b_out) == (77, 4)
    assert (s_in.name, s_in.model, s_in.arch, s_out.arch) == (genai.NAME, OPUS, "input", "output")
    assert dict(genai.attributes("m", "input")) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "m", "gen_ai.response.model": "m", "gen_ai.token.type": "input"}


def klass(model: str = OPUS, source: Source = Source.MAIN, speed: str = "",
          gap: str = "") -> CountClass:
    """A price class (or, with ``gap``, a gap class) of project /home/u/app."""
    return CountClass(model, "/home/u/app", int(source), "", "standard", speed, 0, 0, gap)


def test_native_samples_regroup_the_catalogue_samples_exactly() -> None:
    """Native tokens are the catalogue's by type (cacheCreation = 5m + 1h), cost their sum."""
    exposure = Exposure(RateTable.load(), LabelPolicy(), {"mla": 1}, 4.0)
    sums = (3, 15, 700, 30_000, 1_200, 800, 0)  # requests, in, out, read, w5, w1h, searches
    got = dict(native.Native(exposure).samples(klass(source=Source.COMPACTION), sums))
    base = (("model", OPUS), ("query_source", "auxiliary"))
    assert {k[1][-1][1]: v for k, v in got.items() if k[0] == native.TOKEN_USAGE} == {
        "input": 15, "output": 700, "cacheRead": 30_000, "cacheCreation": 2_000}
    catalogue = sum(v for (name, _), v in exposure.samples(klass(source=Source.COMPACTION), sums)
                    if name == "cost_usd")
    assert got[(native.COST_USAGE, base)] == catalogue > 0  # the same float, not approximately


def test_native_labels_sources_unpriced_gaps_and_caps() -> None:
    """Labels model, query_source (and type); no cost when unpriced; nothing for gap classes."""
    exposure = Exposure(RateTable.load(), LabelPolicy(max_models=1), {}, 4.0)
    samples = native.Native(exposure)
    sums = (1, 1, 1, 1, 1, 1, 0)
    sub = samples.samples(klass(source=Source.SUBAGENT, speed="fast"), sums)
    assert {labels for (_, labels), _ in sub} == {
        (("model", OPUS), ("query_source", "subagent")),
        *((("model", OPUS), ("query_source", "subagent"), ("type", t)) for t in NATIVE_TYPES)}
    other = samples.samples(klass(model="claude-nova-9"), sums)  # past the cap of one model
    assert {name for (name, _), _ in other} == {native.TOKEN_USAGE}  # unpriced: no cost
    assert {dict(labels)["model"] for (_, labels), _ in other} == {"other"}
    assert samples.samples(klass(gap="lt_5m"), sums) == []
    assert set(native.QUERY_SOURCE) == {s.label for s in Source}


def test_modes_are_checked_and_views_follow_them() -> None:
    """Unknown modes are refused; only genai needs its own aggregation (its buckets, seedable)."""
    assert check(["genai", "native", "genai"]) == ("native", "genai")
    with pytest.raises(ValueError, match="bogus"):
        check(["bogus"])
    assert aggregations(["native"]) == {}
    assert list(aggregations(["genai"])) == [genai.NAME]


def test_settings_and_flag() -> None:
    """The setting takes a list (TOML, flags) or a comma list (environment); bad modes fail."""
    assert load_settings({"compat": "genai, native,genai"}, {}).compat == ["genai", "native"]
    assert load_settings({}, {}).compat == []
    with pytest.raises(ConfigError, match="compat"):
        load_settings({"compat": ["native", "prometheus"]}, {})
    proc = subprocess.run([sys.executable, "-m", "exporter", "serve", "--compat", "otel"],
                          capture_output=True, text=True, check=False, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert proc.returncode == 2 and "--compat" in proc.stderr


def test_recording_always_takes_the_genai_rows_out() -> None:
    """With the family off, GenAI rollup rows are dropped and every other row passes through."""
    other = (1, HistSeries("request_output_tokens", OPUS, 0, ""), 3, 1.0)
    ours = (1, genai.series(OPUS, "input"), 2, 1.0)
    rows: list[HistRow] = [other, ours]
    off = Families((), Exposure(RateTable.load(), LabelPolicy(), {}, 4.0), MeterProvider())
    assert off.record_genai_rows(rows, {1}) == [other]


# ------------------------------------------------------------------ the projection
@pytest.mark.parametrize("mode", ["native", "genai"])
def test_golden_exposition(tmp_path: Path, mode: str) -> None:
    """One mode's families in the exposition equal its golden file (UPDATE_GOLDEN=1 rewrites it).

    Only the compatibility lines: the catalogue's are test_metrics' golden file's
    business, and the next test shows a mode leaves them as they are.
    """
    _proj, registry, _ = loaded(tmp_path, HISTORY, mode)
    text = "".join(ln + "\n" for ln in exposition(registry).splitlines() if COMPAT_FAMILY.match(ln))
    path = GOLDEN / f"exposition_compat_{mode}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_compat_adds_families_and_changes_no_catalogue_line(tmp_path: Path) -> None:
    """Default: no compat family. Both modes on: every other line is the default's, as is."""
    _p, default, _ = loaded(tmp_path / "d", HISTORY)
    _q, both, _ = loaded(tmp_path / "b", HISTORY, "native", "genai")
    plain, extended = exposition(default), exposition(both)
    assert not [ln for ln in plain.splitlines() if COMPAT_FAMILY.match(ln)]
    added = [ln for ln in extended.splitlines() if COMPAT_FAMILY.match(ln)]
    assert [ln for ln in extended.splitlines() if not COMPAT_FAMILY.match(ln)] == (
        plain.splitlines())
    assert {ln.split("{")[0] for ln in added if not ln.startswith("#")} == {
        "claude_code_token_usage_tokens_total", "claude_code_cost_usage_USD_total",
        "gen_ai_client_token_usage_bucket", "gen_ai_client_token_usage_count",
        "gen_ai_client_token_usage_sum"}


def test_native_totals_equal_the_catalogue(tmp_path: Path) -> None:
    """Tokens by type, cost in all, by model and by source: the same numbers as our families."""
    _proj, registry, _ = loaded(tmp_path, HISTORY, "native")
    ours = by(registry, "claude_code_tokens_total", "type")
    theirs = by(registry, "claude_code_token_usage_tokens_total", "type")
    assert theirs == {"input": ours["input"], "output": ours["output"],
                      "cacheRead": ours["cache_read"],
                      "cacheCreation": ours["cache_write_5m"] + ours["cache_write_1h"]}
    cost = by(registry, "claude_code_cost_usd_total", "model")
    assert by(registry, "claude_code_cost_usage_USD_total", "model") == cost
    assert set(cost) == {OPUS, HAIKU, SONNET}  # claude-nova-9 is unpriced: tokens only
    source = by(registry, "claude_code_cost_usd_total", "source")
    assert by(registry, "claude_code_cost_usage_USD_total", "query_source") == {
        "main": source["main"], "subagent": source["subagent"],
        "auxiliary": source["compaction"]}
    opus = (("model", OPUS), ("query_source", "main"), ("type", "input"))
    native_input = counters(registry, "claude_code_token_usage")
    assert native_input[("claude_code_token_usage_tokens_total", opus)] == 5 + 5 + 70  # e: fast


def test_genai_histogram_is_the_requests(tmp_path: Path) -> None:
    """Per model and type: one observation per request, sums of prompts and outputs, buckets."""
    _proj, registry, _ = loaded(tmp_path, HISTORY, "genai")
    want = expected_genai(HISTORY)
    assert genai_points(registry) == want
    assert want[(OPUS, "input")][1] == sum(r.context for r in HISTORY if r.model == OPUS)


def test_live_batches_then_a_restart_give_the_same_compat_samples(tmp_path: Path) -> None:
    """Counters move per batch, histograms at settle; a restart starts where the live one is."""
    modes = ("native", "genai")
    ledger = ledger_of(tmp_path / "l.db", [], options=options(*modes), clock=lambda: T0)
    registry = CollectorRegistry()
    live = Projection(RateTable.load(), options(*modes), registry, clock=lambda: T0)
    live.load(ledger)
    for i in range(0, len(HISTORY), 3):
        part = HISTORY[i:i + 3]
        parsed = Parsed()
        for r in part:
            parsed.add(r)
        live.apply(ledger.apply(parsed, [], 0, appearances(part)))
    assert sum(by(registry, "claude_code_token_usage_tokens_total", "type").values()) == sum(
        r.input + r.output + r.cache_read + r.cache_write for r in HISTORY)
    assert not genai_points(registry)  # nothing settled yet
    live.apply(ledger.settle(force=True))
    assert genai_points(registry) == expected_genai(HISTORY)
    again = CollectorRegistry()
    Projection(RateTable.load(), options(*modes), again, clock=lambda: T0).load(ledger)
    assert counters(again, "claude_code_") == counters(registry, "claude_code_")
    assert counters(again, "gen_ai_") == counters(registry, "gen_ai_")


def test_backfill_writes_the_compat_families_and_ends_where_serve_starts(tmp_path: Path) -> None:
    """With both modes the history ends at serve's start-up values; other lines are unchanged."""
    pricing = RateTable.load()

    def history(*modes: str) -> str:
        ledger = ledger_of(tmp_path / "-".join(("l", *modes)) / "l.db", HISTORY,
                           options=options(*modes))
        serve = serve_samples(ledger, pricing, options(*modes))  # the end is checked against it
        out = io.StringIO()
        write_history(ledger.requests(), pricing, options(*modes), out,
                      BackfillOptions(step=60), now=T0 + 7_200, serve=serve)
        ledger.close()
        return out.getvalue()

    both, plain = history("native", "genai"), history()
    assert not [ln for ln in plain.splitlines() if COMPAT_FAMILY.match(ln)]
    assert [ln for ln in both.splitlines() if not COMPAT_FAMILY.match(ln)] == plain.splitlines()
    for family, kind in (("claude_code_token_usage_tokens", "counter"),
                         ("claude_code_cost_usage_USD", "counter"),
                         ("gen_ai_client_token_usage", "histogram")):
        assert f"# TYPE {family} {kind}" in both.splitlines()


def test_dashboard_25255_on_backfilled_history(tmp_path: Path) -> None:
    """`backfill --compat native` made into blocks by promtool: the panels equal ours on them."""
    promtool = require_binary("promtool")
    tree = Tree(tmp_path / "claude")
    requests = tree.write(CALLS, T0)
    out, blocks = tmp_path / "history.om", tmp_path / "blocks"
    until = T0 + 3_600
    subprocess.run([sys.executable, "-m", "exporter", "backfill", "--data-dir",
                    str(tree.root), "--state-dir", str(tmp_path / "state"), "-o", str(out),
                    "--until", _iso(until), "--compat", "native", "--log-level", "error"],
                   check=True, timeout=300, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    made = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(out),
                           str(blocks)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert made.returncode == 0, made.stderr + made.stdout
    with PromServer(prometheus_config([]), tmp_path / "prom", storage=blocks,
                    extra_args=["--storage.tsdb.retention.time=100y"]) as prom:
        at = newest(prom, "claude_code_cost_usage_USD_total", until)
        assert at > T0  # the history's last boundary, after every request
        assert_dashboard(prom, at, "2h", truth(requests))


Points = dict[tuple[str, str], tuple[int, float, tuple[int, ...]]]  # count, sum, cumulative


def expected_genai(requests: Sequence[Request]) -> Points:
    """What the GenAI histogram must hold for ``requests``, per (model, token type)."""
    out: Points = {}
    values: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in requests:
        values[(r.model, "input")].append(r.context)
        values[(r.model, "output")].append(r.output)
    for key, vals in values.items():
        per = Counter(genai.bucket(v) for v in vals)
        cumulative = tuple(sum(per[j] for j in range(i + 1)) for i in range(len(genai.BOUNDS) + 1))
        out[key] = (len(vals), float(sum(vals)), cumulative)
    return out


def genai_points(registry: CollectorRegistry) -> Points:
    """The GenAI histogram in an exposition, per (model, token type); checks its attributes."""
    found: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"le": {}})
    for fam in registry.collect():
        if fam.name != "gen_ai_client_token_usage":
            continue
        for s in fam.samples:
            labels = dict(s.labels)
            assert labels.pop("gen_ai_operation_name") == "chat"
            assert labels.pop("gen_ai_provider_name") == "anthropic"
            model = labels.pop("gen_ai_request_model")
            assert labels.pop("gen_ai_response_model") == model
            key = (model, labels.pop("gen_ai_token_type"))
            le = labels.pop("le", None)
            assert not labels
            if le is not None:
                found[key]["le"][float(le)] = int(s.value)
            elif s.name.endswith("_count"):
                found[key]["count"] = int(s.value)
            elif s.name.endswith("_sum"):
                found[key]["sum"] = s.value
    out: Points = {}
    for key, p in found.items():
        bounds = sorted(p["le"])
        assert bounds == [*map(float, genai.BOUNDS), float("inf")]
        out[key] = (p["count"], p["sum"], tuple(p["le"][b] for b in bounds))
    return out


# ------------------------------------------------------------------ real processes
@dataclass(frozen=True)
class Call:
    """One API request to write into a transcript."""

    model: str
    source: Source
    inp: int
    output: int
    read: int
    w5: int
    w1h: int
    speed: str = ""


class Tree:
    """A transcript root written line by line: a main file, subagent and compaction files."""

    def __init__(self, root: Path, session: str = "5e55107a-0000-4000-8000-00000000c0de") -> None:
        """Files under ``root/projects/<encoded cwd>/``."""
        self.root = root
        self.session = session
        self.cwd = "/home/u/app"
        self.folder = root / "projects" / "-home-u-app"
        (self.folder / session / "subagents").mkdir(parents=True, exist_ok=True)
        self.n = 0

    def write(self, calls: Sequence[Call], ts: float) -> list[Request]:
        """Append one assistant line per call; return them as the ledger will count them."""
        out = []
        for call in calls:
            self.n += 1
            agent = {Source.SUBAGENT: "a1b2c3", Source.COMPACTION: "acompact-9f8e"}.get(call.source)
            path = (self.folder / f"{self.session}.jsonl" if agent is None
                    else self.folder / self.session / "subagents" / f"agent-{agent}.jsonl")
            usage = {"input_tokens": call.inp, "output_tokens": call.output,
                     "cache_read_input_tokens": call.read,
                     "cache_creation_input_tokens": call.w5 + call.w1h,
                     "cache_creation": {"ephemeral_5m_input_tokens": call.w5,
                                        "ephemeral_1h_input_tokens": call.w1h},
                     "service_tier": "standard", "speed": call.speed or "standard"}
            at = ts + self.n
            line: dict[str, Any] = {
                "parentUuid": None, "isSidechain": agent is not None, "userType": "external",
                "cwd": self.cwd, "sessionId": self.session, "version": "2.1.39",
                "type": "assistant", "requestId": f"req_011C{self.n:012d}",
                "timestamp": _iso(at),
                "message": {"model": call.model, "id": f"msg_01{self.n:012d}", "type": "message",
                            "role": "assistant", "content": [{"type": "text", "text": "."}],
                            "usage": usage}}
            if agent is not None:
                line["agentId"] = agent
            with path.open("a") as fh:
                fh.write(json.dumps(line) + "\n")
            out.append(Request(line["message"]["id"], at, call.model, self.session, self.cwd,
                               call.source, call.inp, call.output, call.read, call.w5, call.w1h,
                               "standard", "", call.speed or "standard"))
        return out


def _iso(ts: float) -> str:
    """An ISO-8601 UTC timestamp with milliseconds, as Claude Code writes them."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


KINDS = [(OPUS, Source.MAIN), (HAIKU, Source.SUBAGENT), (OPUS, Source.COMPACTION),
         (SONNET, Source.MAIN)]
CALLS = [
    Call(OPUS, Source.MAIN, 3, 812, 41_000, 2_500, 0),
    Call(OPUS, Source.MAIN, 9, 95, 44_000, 0, 900),
    Call(OPUS, Source.MAIN, 2, 33, 700, 0, 0, "fast"),
    Call(HAIKU, Source.SUBAGENT, 12, 4_000, 9_100, 800, 0),
    Call(HAIKU, Source.SUBAGENT, 1, 70, 0, 15_000, 0),
    Call(OPUS, Source.COMPACTION, 4, 9_999, 160_000, 0, 0),
    Call(SONNET, Source.MAIN, 120, 640, 0, 0, 30_000),
]


def zero_calls() -> list[Call]:
    """One request with no tokens per series: every series begins at 0 in Prometheus."""
    return [Call(model, source, 0, 0, 0, 0, 0) for model, source in KINDS]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    """A started-on-demand real Prometheus, stopped at teardown."""
    servers: list[PromServer] = []

    def start(target: str) -> PromServer:
        config = prometheus_config([static_job("claude-code", [target])], interval="1s")
        servers.append(PromServer(config, tmp_path / "prom").start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def instant(prom: PromServer, expr: str, at: float) -> dict[str, float]:
    """An instant query at ``at``: value by the one grouping label's value ("" when none)."""
    result = prom.api("query", {"query": expr, "time": f"{at:.3f}"})["result"]
    return {next(iter(s["metric"].values()), ""): float(s["value"][1]) for s in result}


def test_dashboard_25255_answers_our_totals_on_a_real_prometheus(
    tmp_path: Path, prometheus: Any
) -> None:
    """Dashboard 25255's main panels, on Prometheus scraping `serve --compat native`, equal ours."""
    tree = Tree(tmp_path / "claude")
    tree.write(zero_calls(), T0)
    daemon = Serve(tree.root, tmp_path / "state", "--compat", "native")
    try:
        prom = prometheus(daemon.url.removeprefix("http://"))
        series = len(NATIVE_TYPES) * len(KINDS)
        prom.wait_for("count_over_time(claude_code_token_usage_tokens_total[1h]) >= 2",
                      lambda r: len(r) == series, timeout=60)  # zeros scraped twice
        requests = tree.write(CALLS, T0 + 100)
        want = truth(requests)
        poll(lambda: daemon_cost(daemon) == pytest.approx(want["cost"], abs=1e-7), 60,
             "the daemon counted the calls")
        prom.wait_for(f"sum(claude_code_cost_usage_USD_total) == {daemon_cost(daemon)!r}",
                      timeout=60)
        assert_dashboard(prom, newest(prom, "claude_code_cost_usage_USD_total"), "1h", want)
    finally:
        assert daemon.stop() == 0


def newest(prom: PromServer, metric: str, at: float | None = None) -> float:
    """The time of the newest sample of ``metric`` (evaluated there, nothing is extrapolated)."""
    params = {"query": f"max(timestamp({metric}))"}
    if at is not None:
        params["time"] = f"{at:.3f}"
    return float(prom.api("query", params)["result"][0]["value"][1])


def assert_dashboard(prom: PromServer, at: float, window: str, want: dict[str, Any]) -> None:
    """Dashboard 25255's panels at ``at`` equal our families' values there, and ``want``.

    Every series began at 0 inside ``window`` and ``at`` is its newest sample, so
    ``increase()`` is the counter's whole growth: nothing is extrapolated.
    """

    def panel(title: str) -> dict[str, float]:
        return instant(prom, grafana(DASHBOARD_25255[title], window), at)

    ours = {name: instant(prom, expr, at) for name, expr in {
        "cost": "sum(claude_code_cost_usd_total)",
        "tokens": "sum by (type) (claude_code_tokens_total)",
        "model": "sum by (model) (claude_code_cost_usd_total)",
        "source": "sum by (source) (claude_code_cost_usd_total)",
    }.items()}
    # Each dollar series is shown rounded to the nanodollar (/metrics without float
    # noise), so sums over two families' different series agree to a few nanodollars.
    assert panel("Total Cost")[""] == pytest.approx(ours["cost"][""], abs=1e-8)
    assert panel("Total Cost")[""] == pytest.approx(want["cost"], abs=1e-7)
    assert panel("Total Tokens")[""] == sum(ours["tokens"].values()) == want["tokens"]
    tokens = ours["tokens"]
    assert panel("Tokens by Type") == {
        "input": tokens["input"], "output": tokens["output"], "cacheRead": tokens["cache_read"],
        "cacheCreation": tokens["cache_write_5m"] + tokens["cache_write_1h"]} == want["by_type"]
    assert panel("Cost by Model") == pytest.approx(ours["model"], abs=1e-8)
    assert set(ours["model"]) == {OPUS, HAIKU, SONNET}
    assert panel("Cost by query_source") == pytest.approx({
        "main": ours["source"]["main"], "subagent": ours["source"]["subagent"],
        "auxiliary": ours["source"]["compaction"]}, abs=1e-8)
    hit = tokens["cache_read"] / sum(v for k, v in tokens.items() if k != "output")
    assert panel("Cache hit ratio")[""] == pytest.approx(hit, rel=1e-12)
    assert hit == pytest.approx(want["hit"], rel=1e-12)


def daemon_cost(daemon: Serve) -> float:
    """The native cost family's total in one scrape of the daemon."""
    fams = daemon.scrape()
    fam = fams.get("claude_code_cost_usage_USD")
    return float(sum(s.value for s in fam.samples if s.name.endswith("_total"))) if fam else 0.0


def truth(requests: Sequence[Request]) -> dict[str, Any]:
    """Totals of ``requests`` computed here: tokens by native type, cost, cache hit ratio."""
    pricing = RateTable.load()
    by_type = {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheCreation": 0.0}
    cost = 0.0
    for r in requests:
        by_type["input"] += r.input
        by_type["output"] += r.output
        by_type["cacheRead"] += r.cache_read
        by_type["cacheCreation"] += r.cache_write
        cost += sum((pricing.cost(r) or {}).values())
    prompt = by_type["input"] + by_type["cacheRead"] + by_type["cacheCreation"]
    return {"by_type": by_type, "tokens": sum(by_type.values()), "cost": cost,
            "hit": by_type["cacheRead"] / prompt}


def test_genai_over_otlp_and_prometheus_match_the_ledger(tmp_path: Path) -> None:
    """`serve --compat genai`: the OTLP histogram and the scrape both hold the ledger's requests."""
    tree = Tree(tmp_path / "claude")
    requests = tree.write(CALLS, T0)
    with Receiver() as receiver:
        daemon = Serve(tree.root, tmp_path / "state", "--compat", "genai",
                        "--otlp-endpoint", receiver.url, "--otlp-interval-seconds", "0.3",
                        "--otlp-user", "none")
        try:
            want = expected_genai(requests)

            def pushed() -> dict[tuple[str, str], Any] | None:
                last = receiver.last()
                metric = metrics_of(last[1]).get(genai.NAME) if last else None
                points = otlp_points(metric) if metric is not None else {}
                return points if points.keys() == want.keys() and all(
                    p[0] == want[k][0] for k, p in points.items()) else None

            points = poll(pushed, 60, "the GenAI histogram pushed with every request")
            scraped = daemon.scrape()
        finally:
            assert daemon.stop() == 0
    metric = metrics_of(receiver.requests[-1][1])[genai.NAME]
    assert metric.unit == "{token}" and metric.histogram.aggregation_temporality == CUMULATIVE
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    try:
        rows = ledger.read("SELECT model, input, output, cache_read, cache_write_5m, "
                           "cache_write_1h FROM requests")
    finally:
        ledger.close()
    from_ledger = expected_genai([req(f"r{i}", T0, model=m, inp=i_, output=o, read=cr, w5=w5,
                                      w1h=w1) for i, (m, i_, o, cr, w5, w1) in enumerate(rows)])
    assert points == from_ledger == want
    assert "gen_ai_client_token_usage" in scraped  # the translated family, as collectors name it
    buckets = [s for s in scraped["gen_ai_client_token_usage"].samples
               if s.name == "gen_ai_client_token_usage_bucket"]
    assert {s.labels["gen_ai_token_type"] for s in buckets} == {"input", "output"}
    assert {s.labels["gen_ai_request_model"] for s in buckets} == {OPUS, HAIKU, SONNET}
    assert not [f for f in scraped if f.startswith("claude_code_token_usage")]  # native is off


def otlp_points(metric: Any) -> Points:
    """The decoded OTLP histogram per (model, token type): count, sum, cumulative buckets."""
    out: Points = {}
    for p in metric.histogram.data_points:
        a = attrs(p)
        assert list(p.explicit_bounds) == [float(b) for b in genai.BOUNDS]
        assert (a["gen_ai.provider.name"], a["gen_ai.operation.name"]) == ("anthropic", "chat")
        running, cumulative = 0, []
        for n in p.bucket_counts:
            running += n
            cumulative.append(running)
        out[(a["gen_ai.request.model"], a["gen_ai.token.type"])] = (
            int(p.count), float(p.sum), tuple(cumulative))
    return out
