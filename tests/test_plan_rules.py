"""The plan-limit alerts (deploy/prometheus/rules/claude-code-plan.yml) through promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.projections.plan.gauges import ALL_FAMILIES
from tests.support.paths import ROOT
from tests.support.prometheus import require_binary

PROM_DIR = ROOT / "deploy" / "prometheus"
RULES = PROM_DIR / "rules" / "claude-code-plan.yml"
TESTS = PROM_DIR / "tests" / "claude-code-plan-test.yml"
GOLDEN = ROOT / "tests" / "golden" / "exposition.txt"
ALERTS = {"ClaudeCodeFiveHourLimitAhead", "ClaudeCodeWeeklyLimitAhead", "ClaudeCodeWeeklyLimitHigh",
          "ClaudeCodePlanSamplesStale", "CodexFiveHourLimitAhead", "CodexWeeklyLimitAhead",
          "CodexWeeklyLimitHigh"}


@pytest.fixture(scope="module")
def promtool() -> str:
    """Path of promtool (Debian package prometheus)."""
    return require_binary("promtool")


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing its output as text."""
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def rules() -> list[dict[str, Any]]:
    """The alerting rules of the plan file."""
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_checks_and_unit_tests_pass(promtool: str) -> None:
    """Promtool accepts the rules and their unit tests pass."""
    check = run([promtool, "check", "rules", str(RULES)], ROOT)
    assert check.returncode == 0 and "SUCCESS: 7 rules found" in check.stdout, check.stdout
    test = run([promtool, "test", "rules", TESTS.name], TESTS.parent)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


def test_each_alert_fires_and_stays_quiet_in_a_test_case() -> None:
    """Every alert has a case where it fires and one where it does not; no others."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for group in yaml.safe_load(TESTS.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert {r["alert"] for r in rules()} == ALERTS
    assert firing == ALERTS and quiet == ALERTS


def test_every_alert_is_documented_with_severity() -> None:
    """Severity label, summary and description on each; each alert is named in the docs."""
    doc = (ROOT / "docs" / "plan-limits.md").read_text()
    for rule in rules():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"].strip() and rule["annotations"]["description"]
        assert f"`{rule['alert']}`" in doc, rule["alert"]


def test_rules_read_only_metrics_the_exporter_serves() -> None:
    """Every claude_code_* name is a plan family or in the golden exposition."""
    served = {fam.exposed() for fam in ALL_FAMILIES}
    golden = {re.split(r"[{ ]", line, maxsplit=1)[0]
              for line in GOLDEN.read_text().splitlines() if line and not line.startswith("#")}
    names = set(re.findall(r"\bclaude_code_[a-z0-9_]+", RULES.read_text()))
    assert names, "no metric names found"
    assert names - served - golden == set()


def test_limit_alerts_use_the_pace_gauges_not_a_slope() -> None:
    """The limit-ahead alerts read the exporter's projection; no rule fits a slope itself."""
    by_name = {r["alert"]: r["expr"] for r in rules()}
    for alert in ("ClaudeCodeFiveHourLimitAhead", "ClaudeCodeWeeklyLimitAhead"):
        assert "claude_code_plan_window_projected_ratio" in by_name[alert], alert
    for alert in ("CodexFiveHourLimitAhead", "CodexWeeklyLimitAhead"):
        assert "claude_code_codex_plan_window_projected_ratio" in by_name[alert], alert
    assert "deriv(" not in RULES.read_text()


@pytest.mark.parametrize(
    ("alert", "old", "new"),
    [
        ("ClaudeCodeFiveHourLimitAhead",
         'code_plan_window_projected_ratio{window="five_hour"} >= 1',
         'code_plan_window_projected_ratio{window="five_hour"} >= 2'),
        ("ClaudeCodeWeeklyLimitAhead", 'code_plan_window_projected_ratio{window="seven_day"} >= 1',
         'code_plan_window_projected_ratio{window="seven_day"} >= 2'),
        ("CodexFiveHourLimitAhead", '_codex_plan_window_projected_ratio{window="five_hour"} >= 1',
         '_codex_plan_window_projected_ratio{window="five_hour"} >= 2'),
        ("CodexWeeklyLimitAhead", '_codex_plan_window_projected_ratio{window="seven_day"} >= 1',
         '_codex_plan_window_projected_ratio{window="seven_day"} >= 2'),
        ("ClaudeCodeWeeklyLimitHigh", 'code_plan_window_used_ratio{window="seven_day"} > 0.8',
         'code_plan_window_used_ratio{window="seven_day"} > 0.9'),
        ("CodexWeeklyLimitHigh", '_codex_plan_window_used_ratio{window="seven_day"} > 0.8',
         '_codex_plan_window_used_ratio{window="seven_day"} > 0.9'),
        ("ClaudeCodePlanSamplesStale", ") > 900", ") > 9000"),
    ],
)
def test_unit_tests_catch_a_changed_threshold(
    promtool: str, tmp_path: Path, alert: str, old: str, new: str
) -> None:
    """The unit tests fail when an alert's threshold moves (they can fail)."""
    shutil.copytree(PROM_DIR, tmp_path / "prometheus")
    copy = tmp_path / "prometheus" / "rules" / RULES.name
    text = copy.read_text()
    assert text.count(old) == 1, old
    copy.write_text(text.replace(old, new))
    proc = run([promtool, "test", "rules", TESTS.name], tmp_path / "prometheus" / "tests")
    assert proc.returncode != 0
    assert alert in proc.stdout + proc.stderr
