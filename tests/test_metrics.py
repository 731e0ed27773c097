"""The metrics projection: catalogue exposition from rollups, live updates, settling."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.projections.labels import MAX_MODELS
from exporter.records import Request
from tests.support.clock import Clock
from tests.support.ledgers import appearances, ledger_of
from tests.support.projection import GOLDEN_HISTORY, T0, batch, loaded, options, projection, req

GOLDEN = Path(__file__).parent / "golden" / "exposition.txt"


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in an exposition, by name and exact labels."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_:]+)(?:\{(.*)\})? (\S+)", line)
        if m and m.group(1) == name:
            got = ",".join(sorted((m.group(2) or "").split(","))) if m.group(2) else ""
            if got == want:
                return float(m.group(3))
    raise AssertionError(f"{name}{labels} not exposed")




def test_golden_exposition(tmp_path: Path) -> None:
    """The exposition of a fixed ledger equals the golden file (UPDATE_GOLDEN=1 rewrites it)."""
    ledger = ledger_of(tmp_path / "l.db", GOLDEN_HISTORY, options=options(),
                       lines={"usage": 6, "duplicate": 4, "other": 20},
                       rejected={"invalid_json": 1}, bytes_read=12_345)
    proj, registry = projection()
    proj.load(ledger)
    text = generate_latest(registry).decode()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_counters_match_the_requests(tmp_path: Path) -> None:
    """Requests, tokens, cost, gap buckets and lines add up to the loaded ledger."""
    _proj, registry, _ = loaded(tmp_path, GOLDEN_HISTORY)
    text = generate_latest(registry).decode()
    base = {"model": "claude-opus-4-6", "project": "app", "source": "main"}
    assert sample(text, "claude_code_requests_total", **base) == 4
    assert sample(text, "claude_code_tokens_total", type="output", **base) == 100 * 3 + 300
    assert sample(text, "claude_code_requests_after_gap_total", gap="lt_5m") == 1
    assert sample(text, "claude_code_requests_after_gap_total", gap="5m_to_1h") == 1
    assert sample(text, "claude_code_requests_after_gap_total", gap="gt_1h") == 1
    assert sample(text, "claude_code_requests_after_gap_total", gap="first") == 2
    assert sample(text, "claude_code_prompt_tokens_after_gap_total", gap="gt_1h",
                  type="cache_write") == 20_500
    assert sample(text, "claude_code_unpriced_tokens_total", model="claude-nova-9") == 10_605
    cost = sample(text, "claude_code_cost_usd_total", type="cache_write_1h", **base)
    assert cost == pytest.approx(20_000 * 10 / 1e6)
    assert sample(text, "claude_code_request_gap_seconds_bucket", le="300") == 1
    assert sample(text, "claude_code_request_gap_seconds_bucket", le="3600") == 2
    assert sample(text, "claude_code_request_gap_seconds_count") == 3


def test_live_batch_counts_at_once_and_settles_histograms_later(tmp_path: Path) -> None:
    """A new request moves counters immediately and the histograms after the quiet time."""
    clock = Clock(T0 + 100)
    proj, registry, ledger = loaded(tmp_path, GOLDEN_HISTORY, clock, settle_seconds=5.0)
    first = req("n", T0 + 60, output=2)
    apps = appearances([first])
    proj.apply(ledger.apply(batch(ledger, first), [], 10, apps))
    proj.apply(ledger.apply(batch(ledger, first._replace(output=700)), [], 0, apps))
    text = generate_latest(registry).decode()
    labels = {"model": "claude-opus-4-6", "source": "main"}
    assert sample(text, "claude_code_tokens_total", type="output", project="app",
                  **labels) == 600 + 700
    assert sample(text, "claude_code_request_output_tokens_count", **labels) == 4
    assert not ledger.settle().hists
    clock.now += 6
    proj.apply(ledger.settle())
    text = generate_latest(registry).decode()
    assert sample(text, "claude_code_request_output_tokens_count", **labels) == 5
    assert sample(text, "claude_code_request_output_tokens_sum", **labels) == 100 * 3 + 300 + 700
    proj.apply(ledger.apply(batch(ledger, first._replace(output=900)), [], 0, apps))
    text = generate_latest(registry).decode()
    assert sample(text, "claude_code_exporter_late_updates_total") == 1
    assert sample(text, "claude_code_tokens_total", type="output", project="app",
                  **labels) == 600 + 900
    assert ledger.counters("late_updates") == {"": 1}  # and a restart still says so


def test_live_gauges_follow_the_clock(tmp_path: Path) -> None:
    """Active sessions and warm KV count sessions younger than the TTLs."""
    clock = Clock(T0 + 5_100)
    _proj, registry, _ = loaded(tmp_path, GOLDEN_HISTORY, clock)
    text = generate_latest(registry).decode()
    assert sample(text, "claude_code_active_sessions", ttl="5m") == 1
    assert sample(text, "claude_code_warm_kv_cache_bytes", arch="mla") == 20_505 * 70_272
    clock.now += 400  # past 5 minutes, but session s1 wrote 1h cache
    text = generate_latest(registry).decode()
    assert sample(text, "claude_code_active_sessions", ttl="5m") == 0
    assert sample(text, "claude_code_active_sessions", ttl="1h") == 1
    assert sample(text, "claude_code_warm_kv_cache_bytes", arch="mla") == 20_505 * 70_272
    clock.now += 4_000
    text = generate_latest(registry).decode()
    assert sample(text, "claude_code_warm_kv_cache_bytes", arch="gqa") == 0


def test_project_policy_and_cardinality_cap(tmp_path: Path) -> None:
    """Project paths follow the policy and odd model ids never explode the series."""
    many = [req(f"k{i}", T0 + i, model=f"m{i}\n") for i in range(100)]
    _proj, registry, _ = loaded(tmp_path, many, project_label="hash")
    text = generate_latest(registry).decode()
    models = {m for m in re.findall(r'claude_code_requests_total\{model="([^"]*)"', text)}
    assert len(models) == MAX_MODELS + 1 and "other" in models
    assert re.search(r'project="[0-9a-f]{12}"', text)


def test_counters_do_not_depend_on_the_order_of_increments(tmp_path: Path) -> None:
    """Live batches in any order and a restart's load give bit-identical counter values."""
    import random

    rng = random.Random(5)
    reqs = [req(f"k{i}", T0 + i * 7.3, session=f"s{i % 3}", output=rng.randint(1, 9_999),
                read=rng.randint(0, 300_000), w5=rng.randint(0, 9_999), project=f"/p{i % 2}",
                model=rng.choice(["claude-opus-4-6", "claude-sonnet-4-5", "claude-haiku-4-5"]))
            for i in range(300)]
    _restart, reg_a, _ = loaded(tmp_path / "a", reqs)

    def counters(reg: CollectorRegistry, skip: str = "\0") -> dict[str, float]:
        return {f"{s.name}{sorted(s.labels.items())}": s.value for fam in reg.collect()
                if fam.type == "counter" and skip not in fam.name
                and "exporter" not in fam.name for s in fam.samples}

    def live(name: str, order: list[Request], sizes: int) -> CollectorRegistry:
        ledger = ledger_of(tmp_path / name / "l.db", [], options=options())
        proj, registry = projection()
        proj.load(ledger)
        at = 0
        while at < len(order):  # uneven batches: what a live daemon sees
            step = rng.randint(1, sizes)
            part = order[at:at + step]
            proj.apply(ledger.apply(batch(ledger, *part), [], 0, appearances(part)))
            at += step
        return registry

    assert counters(reg_a) == counters(live("b", reqs, 40))
    mixed = reqs[:]
    rng.shuffle(mixed)  # out of order: gaps differ; every other counter must not
    assert counters(reg_a, "after_gap") == counters(live("c", mixed, 17), "after_gap")
    restarted = ledger_of(tmp_path / "d" / "l.db", [], options=options())
    restarted.close()


def test_a_restart_exposes_what_the_live_daemon_had(tmp_path: Path) -> None:
    """Counters and histograms after a restart equal those of the process that ingested live."""
    ledger = ledger_of(tmp_path / "l.db", [], options=options())
    proj, registry = projection()
    proj.load(ledger)
    for i in range(0, len(GOLDEN_HISTORY), 2):
        part = GOLDEN_HISTORY[i:i + 2]
        proj.apply(ledger.apply(batch(ledger, *part), [], 7, appearances(part)))
    proj.apply(ledger.settle(force=True))

    def samples(reg: CollectorRegistry) -> list[str]:
        text = generate_latest(reg).decode()
        return sorted(ln for ln in text.splitlines() if not ln.startswith("#")
                      and "_created" not in ln)

    before = samples(registry)
    again, reg2 = projection()
    again.load(ledger)
    assert samples(reg2) == before
    assert any(ln.startswith("claude_code_request_gap_seconds_count") for ln in before)


def test_seeded_histogram_equals_recording_each_value() -> None:
    """A histogram begun from a seed exposes what recording each value one by one gives."""
    from exporter.projections import instruments

    values = [3, 999, 1000, 1001, 5e5, 2e6, 7]
    one, reg_one = projection()
    h = one.inst.histograms["request_context_tokens"]
    for v in values:
        h.record(v, {"model": "m", "source": "main"})
    two, reg_two = projection()
    bounds = instruments.BUCKETS["request_context_tokens"]
    counts = [0] * (len(bounds) + 1)
    for v in values:
        counts[sum(1 for b in bounds if v > b)] += 1
    seed = instruments.Seed(tuple(counts), sum(values))
    two.inst.histograms["request_context_tokens"].record(
        0, {"model": "m", "source": "main"}, context=instruments.seed_context(seed))

    def hist(reg: CollectorRegistry) -> list[str]:
        text = generate_latest(reg).decode()
        return [ln for ln in text.splitlines() if "request_context_tokens" in ln
                and not ln.startswith("#") and "_created" not in ln]

    assert hist(reg_one) == hist(reg_two) and hist(reg_one)
