"""The shipped recording rules and alerts on a real Prometheus scraping the real exporter.

``tests/support/stack.py`` runs ``claude-code-exporter serve`` over a generated tree,
gives Prometheus two hours of history made of real scrapes of it (so rules over
1 h, 1 d and ``[30d:1h]`` windows have something to see), and appends requests
while Prometheus scrapes. The daemon's daily budget is 0.01 USD, its monthly
budget 1,000,000 USD; a second target of the job refuses connections.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.exposition import total
from tests.support.prometheus import sample_value
from tests.support.stack import (
    ALERTS_FILE,
    DAY_BUDGET_USD,
    DEAD_USER,
    JOB,
    MONTH_BUDGET_USD,
    RECORDING_FILE,
    USER,
    Stack,
)
from tests.support.wait import poll

TOKEN_TYPES = {"input", "output", "cache_read", "cache_write_5m", "cache_write_1h"}
GAP_TYPES = ("input", "cache_read", "cache_write")

#: Every recording rule and what its value must be for the exporter once the
#: stack has appended requests: rates see live growth, shares are fractions,
#: nothing was rejected. A rule added to the file must be added here.
EXPECTED: dict[str, str] = {
    "claude_code:cost_usd_per_hour:rate15m": "> 0",
    "claude_code:cost_usd_per_hour:rate1h": "> 0",
    "claude_code:cost_usd_per_hour_by_model:rate1h": "> 0",
    "claude_code:cost_usd:increase1d": "> 0",
    "claude_code:cost_usd:increase30d": "> 0",
    "claude_code:tokens_per_second:rate5m": "> 0",
    "claude_code:prompt_tokens_per_second:rate1h": "> 0",
    "claude_code:requests_per_second:rate5m": "> 0",
    "claude_code:cache_read_share:rate1h": "> 0 < 1",
    "claude_code:cache_write_share_by_gap:rate1d": ">= 0 <= 1",
    "claude_code:cache_write_share_after_5m_idle:rate1d": "> 0 < 1",
    "claude_code:cache_write_share_after_1h_idle:rate1d": "> 0 <= 1",
    "claude_code:upload_bytes_per_second:rate5m": "> 0",
    "claude_code:kv_recomputed_bytes_per_second:rate5m": "> 0",
    "claude_code:rejected_lines_per_second:rate5m": "== 0",
    "claude_code:cache_reads_per_output_token:rate1h": "> 0",
    "claude_code:cache_reads_per_output_token:rate1d": "> 0",
    "claude_code:cache_savings_usd_per_hour:rate1h": "> 0",
}


def rule_names(path: Any, key: str) -> list[str]:
    """The ``record`` or ``alert`` names of a rule file, in order."""
    doc = yaml.safe_load(path.read_text())
    return [rule[key] for group in doc["groups"] for rule in group["rules"] if key in rule]


@pytest.fixture(scope="module")
def stack(shared_stack: Stack) -> Stack:
    """The shared stack, with requests appended just now so 5-minute rates see them."""
    shared_stack.live_stage()
    return shared_stack


def exporter(stack: Stack) -> str:
    """The selector matcher of the daemon's series."""
    return f'instance="{stack.address}"'


def active(stack: Stack, alertname: str) -> list[dict[str, Any]]:
    """Pending or firing instances of one alert."""
    return [a for a in stack.prom.alerts() if a["labels"]["alertname"] == alertname]


def test_rule_groups_load_and_evaluate_without_errors(stack: Stack) -> None:
    """Both shipped rule files load completely and every rule evaluates with health ok."""

    def healthy() -> list[dict[str, Any]] | None:
        groups = stack.prom.rules()
        rules = [rule for group in groups for rule in group["rules"]]
        return groups if all(r["health"] == "ok" for r in rules) else None

    groups = poll(healthy, 30, "every rule healthy")
    loaded = {g["name"]: [r["name"] for r in g["rules"]] for g in groups}
    assert loaded == {
        "claude-code-recording": rule_names(RECORDING_FILE, "record"),
        "claude-code-alerts": rule_names(ALERTS_FILE, "alert"),
    }
    errors = [r for g in groups for r in g["rules"] if r.get("lastError")]
    assert not errors, errors


def test_every_recording_rule_yields_data_for_the_exporter(stack: Stack) -> None:
    """Each recording rule has a sample for the daemon, in range, with its target labels kept."""
    assert sorted(EXPECTED) == sorted(rule_names(RECORDING_FILE, "record"))
    results = {}
    for name, condition in EXPECTED.items():
        results[name] = stack.prom.wait_for(f"{name}{{{exporter(stack)}}} {condition}",
                                            timeout=30)
        for sample in results[name]:
            assert sample["metric"]["job"] == JOB, name
            assert sample["metric"]["user"] == USER, name
    labels = {name: {k: {s["metric"].get(k) for s in r} for k in ("type", "arch", "gap")}
              for name, r in results.items()}
    assert labels["claude_code:tokens_per_second:rate5m"]["type"] == TOKEN_TYPES
    assert labels["claude_code:kv_recomputed_bytes_per_second:rate5m"]["arch"] == {"mla", "gqa"}
    assert {"lt_5m", "5m_to_1h", "gt_1h"} <= labels[
        "claude_code:cache_write_share_by_gap:rate1d"]["gap"]
    # Rejected lines: the rule sees the exporter's counter and it did not move.
    fams = stack.final
    rejected = "claude_code_exporter_rejected_lines"
    assert total(fams, rejected) == total(stack.initial, rejected) > 0


def test_daily_and_monthly_spend_rules_match_the_exporter(stack: Stack) -> None:
    """USD of the last day equals the exporter's cost growth; the 30-day sum is within it."""
    cost = "claude_code_cost_usd"
    grown = total(stack.final, cost) - total(stack.initial, cost)
    assert grown > 0
    selector = f"{{{exporter(stack)}}}"

    def day() -> float | None:
        result = stack.prom.query(f"claude_code:cost_usd:increase1d{selector}")
        value = sample_value(result[0]) if result else None
        return value if value is not None and value == pytest.approx(grown, rel=0.02) else None

    last_day = poll(day, 30, f"increase1d ≈ {grown}")
    month = sample_value(stack.prom.query(f"claude_code:cost_usd:increase30d{selector}")[0])
    # Hourly spend summed at full hours: positive (a stage falls in the last full
    # hour's window) and no more than all the growth Prometheus has seen.
    assert 0 < month <= last_day * 1.05


def _gap_deltas(stack: Stack) -> dict[str, dict[str, float]]:
    """Growth of the prompt tokens after each gap bucket, by type, between first and last scrape."""
    name = "claude_code_prompt_tokens_after_gap"
    return {
        gap: {t: total(stack.final, name, gap=gap, type=t) - total(stack.initial, name, gap=gap,
                                                                     type=t)
              for t in GAP_TYPES}
        for gap in ("lt_5m", "5m_to_1h", "gt_1h")
    }


def test_cache_write_share_rules_match_the_exporter(stack: Stack) -> None:
    """The gap-share rules equal cache_write / all prompt tokens of the exporter's growth."""
    deltas = _gap_deltas(stack)

    def share(*gaps: str) -> float:
        written = sum(deltas[g]["cache_write"] for g in gaps)
        return written / sum(sum(deltas[g].values()) for g in gaps)

    by_gap = {s["metric"]["gap"]: sample_value(s) for s in stack.prom.query(
        f"claude_code:cache_write_share_by_gap:rate1d{{{exporter(stack)}}}")}
    for gap in deltas:
        assert by_gap[gap] == pytest.approx(share(gap), rel=0.02), gap
    # The appended requests after > 1 h idle re-wrote their whole prompt, the
    # ones after a few minutes mostly read it: the buckets are told apart.
    assert by_gap["gt_1h"] > 0.9
    assert by_gap["lt_5m"] < 0.5
    after_5m = stack.prom.query(
        f"claude_code:cache_write_share_after_5m_idle:rate1d{{{exporter(stack)}}}")
    after_1h = stack.prom.query(
        f"claude_code:cache_write_share_after_1h_idle:rate1d{{{exporter(stack)}}}")
    assert sample_value(after_5m[0]) == pytest.approx(share("5m_to_1h", "gt_1h"), rel=0.02)
    assert sample_value(after_1h[0]) == pytest.approx(share("gt_1h"), rel=0.02)


def test_daily_budget_alert_goes_pending_and_monthly_does_not(stack: Stack) -> None:
    """Spend over the 0.01 USD daily budget raises the daily alert; the monthly one stays quiet."""
    alerts = stack.prom.wait_for_alert("ClaudeCodeDailyBudgetExceeded", timeout=30)
    assert [a["labels"]["instance"] for a in alerts] == [stack.address]
    labels = alerts[0]["labels"]
    assert (labels["job"], labels["user"], labels["severity"]) == (JOB, USER, "warning")
    assert f"above the daily budget of {DAY_BUDGET_USD:.2f} USD" in (
        alerts[0]["annotations"]["description"])
    # The monthly rule has its input (30-day spend > 0) and a budget to compare with.
    assert stack.prom.query(f"claude_code:cost_usd:increase30d{{{exporter(stack)}}} > 0")
    budget = stack.prom.query(f'claude_code_budget_usd{{{exporter(stack)}, period="month"}}')
    assert sample_value(budget[0]) == MONTH_BUDGET_USD
    assert active(stack, "ClaudeCodeMonthlyBudgetExceeded") == []


def test_exporter_health_alerts_see_up(stack: Stack) -> None:
    """``up`` is 1 for the daemon and 0 for the refusing target, which alone is reported down."""
    up = {s["metric"]["instance"]: sample_value(s)
          for s in stack.prom.wait_for(f'up{{job="{JOB}"}}', lambda r: len(r) == 2)}
    assert up == {stack.address: 1.0, stack.dead_address: 0.0}
    down = stack.prom.wait_for_alert("ClaudeCodeExporterDown", timeout=30)
    assert [(a["labels"]["instance"], a["labels"]["user"]) for a in down] == [
        (stack.dead_address, DEAD_USER)]
    assert active(stack, "ClaudeCodeExporterAbsent") == []
    assert active(stack, "ClaudeCodeExporterMetricsMissing") == []
    assert stack.prom.query(f"claude_code_exporter_build_info{{{exporter(stack)}}}")
