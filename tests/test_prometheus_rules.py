"""The shipped Prometheus config, recording rules and alerts (deploy/prometheus).

promtool checks the config and rules and runs the rule unit tests; structural
tests keep the alerts documented and covered; one test runs a real Prometheus
with the shipped rules against a tiny loopback target.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT
from tests.support.prometheus import (
    ExpositionServer,
    PromServer,
    ServerPool,
    prometheus_config,
    require_binary,
    sample_value,
    static_job,
)

PROM_DIR = ROOT / "deploy" / "prometheus"
CONFIG = PROM_DIR / "prometheus.yml"
RULES_DIR = PROM_DIR / "rules"
TESTS_DIR = PROM_DIR / "tests"
ALERTS_FILE = RULES_DIR / "claude-code-alerts.yml"
RECORDING_FILE = RULES_DIR / "claude-code-recording.yml"
PLAN_FILE = RULES_DIR / "claude-code-plan.yml"  # plan-limit alerts (tests/test_plan_rules.py)
RULE_FILES = sorted(RULES_DIR.glob("*.yml"))
RULE_TEST_FILES = sorted(TESTS_DIR.glob("*.yml"))

SEVERITIES = {"info", "warning", "critical"}


def load_yaml(path: Path) -> Any:
    """Parse a YAML file."""
    return yaml.safe_load(path.read_text())


def run(argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing stdout and stderr together as text."""
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    """Format a finished command's output for an assertion message."""
    return f"$ {' '.join(proc.args)}\nexit {proc.returncode}\n{proc.stdout}{proc.stderr}"


def alert_rules() -> list[dict[str, Any]]:
    """Return every alerting rule of the shipped alerts file."""
    doc = load_yaml(ALERTS_FILE)
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def recording_rules() -> list[dict[str, Any]]:
    """Return every recording rule of the shipped recording file."""
    doc = load_yaml(RECORDING_FILE)
    return [rule for group in doc["groups"] for rule in group["rules"] if "record" in rule]


@pytest.fixture
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., PromServer]]:
    """Start real Prometheus servers; all are stopped at teardown."""
    with ServerPool(tmp_path_factory) as pool:
        yield pool.start


@pytest.fixture(scope="module")
def promtool() -> str:
    """Path of promtool (Debian package prometheus)."""
    return require_binary("promtool")


# ----------------------------------------------------------------- promtool


def test_shipped_files_exist() -> None:
    """The config, both rule files and at least one rule test file are shipped."""
    assert CONFIG.is_file()
    assert ALERTS_FILE in RULE_FILES
    assert RECORDING_FILE in RULE_FILES
    assert RULE_TEST_FILES, f"no promtool rule tests in {TESTS_DIR}"


def test_promtool_check_config(promtool: str) -> None:
    """Promtool check config accepts prometheus.yml and the rule files it names."""
    proc = run([promtool, "check", "config", str(CONFIG)])
    assert proc.returncode == 0, output(proc)
    text = proc.stdout + proc.stderr
    assert f"{len(RULE_FILES)} rule files found" in text, output(proc)
    for rule_file in RULE_FILES:
        assert rule_file.name in text, output(proc)


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(promtool: str, rule_file: Path) -> None:
    """Promtool check rules accepts each shipped rule file."""
    proc = run([promtool, "check", "rules", str(rule_file)])
    assert proc.returncode == 0, output(proc)
    assert "SUCCESS" in proc.stdout, output(proc)


def test_promtool_rule_unit_tests(promtool: str) -> None:
    """Every promtool rule unit test under deploy/prometheus/tests passes."""
    proc = run([promtool, "test", "rules", *map(str, RULE_TEST_FILES)], cwd=TESTS_DIR)
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.count("SUCCESS") == len(RULE_TEST_FILES), output(proc)


def test_promtool_unit_tests_catch_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    """The rule unit tests fail when an alert threshold is changed (they can fail)."""
    shutil.copytree(PROM_DIR, tmp_path / "prometheus")
    alerts = tmp_path / "prometheus" / "rules" / ALERTS_FILE.name
    text = alerts.read_text()
    assert "> 500000" in text
    alerts.write_text(text.replace("> 500000", "> 5000000"))
    tests = sorted((tmp_path / "prometheus" / "tests").glob("*.yml"))
    proc = run([promtool, "test", "rules", *map(str, tests)], cwd=tmp_path)
    assert proc.returncode != 0, output(proc)
    assert "ClaudeCodeExpensiveColdRestart" in proc.stdout + proc.stderr, output(proc)


def test_commented_tls_example_is_valid_config(promtool: str, tmp_path: Path) -> None:
    """The commented TLS + basic-auth job, uncommented in place of the plain job, is valid."""
    lines = CONFIG.read_text().splitlines()
    start = lines.index("  # - job_name: claude-code")
    block = []
    for line in lines[start:]:
        if not line.startswith("  #"):
            break
        block.append("  " + line[4:] if line.startswith("  # ") else line)
    example = yaml.safe_load("\n".join(line[2:] for line in block))
    assert isinstance(example, list) and len(example) == 1
    job = example[0]
    assert job["scheme"] == "https"
    assert job["tls_config"]["ca_file"]
    assert job["basic_auth"]["username"] and job["basic_auth"]["password_file"]

    config = load_yaml(CONFIG)
    config["scrape_configs"] = [
        job if sc["job_name"] == "claude-code" else sc for sc in config["scrape_configs"]
    ]
    path = tmp_path / "prometheus-tls.yml"
    path.write_text(yaml.safe_dump(config))
    proc = run([promtool, "check", "config", "--syntax-only", str(path)])
    assert proc.returncode == 0, output(proc)


# --------------------------------------------------------------- structure


def test_exporter_job_scrapes_default_port_on_loopback() -> None:
    """Job claude-code scrapes 127.0.0.1:9477 and nothing points at port 9464."""
    config = load_yaml(CONFIG)
    jobs = {sc["job_name"]: sc for sc in config["scrape_configs"]}
    targets = [t for sc in jobs["claude-code"]["static_configs"] for t in sc["targets"]]
    assert targets == ["127.0.0.1:9477"]
    assert ":9464" not in yaml.safe_dump(config)
    assert [str(RULES_DIR / Path(p).name) for p in config["rule_files"]] == [
        str(RECORDING_FILE),
        str(ALERTS_FILE),
        str(PLAN_FILE),
        str(RULES_DIR / "claude-code-team.yml"),
    ]
    managers = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert managers == ["127.0.0.1:9093"]


def test_every_alert_has_severity_summary_description() -> None:
    """Each alert has a known severity label and non-empty summary and description."""
    rules = alert_rules()
    assert len(rules) >= 8
    for rule in rules:
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in SEVERITIES, name
        annotations = rule.get("annotations", {})
        assert annotations.get("summary", "").strip(), name
        assert annotations.get("description", "").strip(), name


def test_required_alerts_are_present() -> None:
    """The alerts the runbook promises exist and read the metrics they are about."""
    exprs = {rule["alert"]: rule["expr"] for rule in alert_rules()}
    expected = {
        "ClaudeCodeDailyBudgetExceeded": 'claude_code_budget_usd{period="day"}',
        "ClaudeCodeMonthlyBudgetExceeded": 'claude_code_budget_usd{period="month"}',
        "ClaudeCodeMonthlyBudgetAhead": 'claude_code_budget_projected_usd{period="month"}',
        "ClaudeCodeSpendSpike": "claude_code:cost_usd_per_hour:rate15m",
        "ClaudeCodeCacheReadShareLow": "claude_code:cache_read_share:rate1h",
        "ClaudeCodeExpensiveColdRestart": 'gap="gt_1h", type="cache_write"',
        "ClaudeCodeExporterDown": 'up{job="claude-code"} == 0',
        "ClaudeCodeExporterAbsent": 'absent(up{job="claude-code"})',
        "ClaudeCodeRejectedLinesRising": "claude_code:rejected_lines_per_second:rate5m",
    }
    for name, fragment in expected.items():
        assert name in exprs, f"missing alert {name}"
        assert fragment in exprs[name], (name, exprs[name])


def test_every_alert_has_firing_and_quiet_unit_test() -> None:
    """Every alert appears in a promtool test case where it fires and one where it does not."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TEST_FILES:
        for group in load_yaml(path).get("tests", []):
            for case in group.get("alert_rule_test", []) or []:
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {
        rule["alert"]
        for path in RULE_FILES
        for group in load_yaml(path)["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert names - firing == set(), "alerts without a firing test case"
    assert names - quiet == set(), "alerts without a not-firing test case"
    assert (firing | quiet) - names == set(), "test cases for alerts that do not exist"


def test_recording_rules_are_named_and_value_tested() -> None:
    """Recording rules follow claude_code:<what>:<window> and each has a value check."""
    exprs = [
        case["expr"]
        for path in RULE_TEST_FILES
        for group in load_yaml(path).get("tests", [])
        for case in group.get("promql_expr_test", []) or []
    ]
    names = [rule["record"] for rule in recording_rules()]
    assert len(names) == len(set(names)), "duplicate recording rule"
    for name in names:
        assert re.fullmatch(r"claude_code:[a-z0-9_]+:[a-z0-9_]+", name), name
        pattern = re.compile(re.escape(name) + r"(?![a-z0-9_:])")
        assert any(pattern.search(e) for e in exprs), f"{name} has no promql_expr_test"


def test_recording_rules_keep_target_labels() -> None:
    """Aggregations drop only metric labels, never instance/job/user/team."""
    kept = {"instance", "job", "user", "team"}
    for rule in recording_rules():
        expr = rule["expr"]
        assert "sum(" not in expr.replace(" ", ""), rule["record"]
        assert " by (" not in expr, rule["record"]
        for dropped in re.findall(r"without \(([^)]*)\)", expr):
            labels = {label.strip() for label in dropped.split(",")}
            assert not labels & kept, (rule["record"], labels)


GOLDEN = ROOT / "tests" / "golden" / "exposition.txt"
#: Codex's families (the budget rules sum them with Claude Code's): a mixed exposition.
GOLDEN_CODEX = ROOT / "tests" / "golden" / "exposition_codex.txt"


def test_rules_use_only_exported_metrics_and_label_values() -> None:
    """Every claude_code_* name and literal label value in the rules is in a golden exposition."""
    if not GOLDEN.is_file():
        pytest.skip(f"{GOLDEN} not present")
    golden = [line for path in (GOLDEN, GOLDEN_CODEX) for line in path.read_text().splitlines()
              if not line.startswith("#")]
    exported = {re.split(r"[{ ]", line, maxsplit=1)[0] for line in golden if line}
    exprs = [r["expr"] for r in recording_rules()] + [r["expr"] for r in alert_rules()]
    checked = 0
    for expr in exprs:
        for name, matchers in re.findall(r"\b(claude_code_[a-z0-9_]+)(?:\{([^}]*)\})?", expr):
            assert name in exported, f"{name} is in no golden exposition"
            for label, op, values in re.findall(r'(\w+)\s*(=~|=)\s*"([^"]*)"', matchers):
                alternatives = values.split("|") if op == "=~" else [values]
                for wanted in alternatives:
                    assert re.fullmatch(r"[a-z0-9_]+", wanted), (name, label, values)
                    pair = f'{label}="{wanted}"'
                    assert any(line.startswith(name + "{") and pair in line for line in golden), (
                        f"{name}{{{pair}}} is in no golden exposition"
                    )
                    checked += 1
    assert checked >= 20


# ------------------------------------------------------------ the helper


def test_require_binary_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing binary skips the test when CI is unset."""
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not found"):
        require_binary("no-such-binary-claude-code-test")


def test_require_binary_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing binary fails the test when CI=true."""
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        require_binary("no-such-binary-claude-code-test")


# ------------------------------------------------------- real Prometheus


def exposition(cost: float, cache_read: int, input_tokens: int) -> str:
    """Exposition text of a tiny fake exporter: a daily budget of 1 USD and growing counters."""
    opus = 'model="claude-opus-4-5",project="demo",source="main"'
    return "\n".join(
        [
            "# TYPE claude_code_cost_usd_total counter",
            f'claude_code_cost_usd_total{{{opus},type="cache_read"}} {cost}',
            "# TYPE claude_code_tokens_total counter",
            f'claude_code_tokens_total{{{opus},type="cache_read"}} {cache_read}',
            f'claude_code_tokens_total{{{opus},type="input"}} {input_tokens}',
            "# TYPE claude_code_budget_usd gauge",
            'claude_code_budget_usd{period="day"} 1',
            'claude_code_budget_usd{period="month"} 1000000',
            "# TYPE claude_code_exporter_build_info gauge",
            'claude_code_exporter_build_info{version="0.0.0-test"} 1',
            "",
        ]
    )


def test_real_prometheus_evaluates_shipped_rules(
    prometheus: Callable[..., PromServer],
) -> None:
    """A real Prometheus loads the shipped rules, records them and raises the budget alert."""

    def body() -> str:
        n = target.scrapes
        return exposition(1000 + 100 * n, 9_000_000 * n, 1_000_000 * n)

    with ExpositionServer(body) as target:
        config = prometheus_config(
            [static_job("claude-code", [target.address])], [RECORDING_FILE, ALERTS_FILE]
        )
        server = prometheus(config)

        groups = {g["name"]: len(g["rules"]) for g in server.rules()}
        assert groups == {
            "claude-code-recording": len(recording_rules()),
            "claude-code-alerts": len(alert_rules()),
        }

        up = server.wait_for('up{job="claude-code"} == 1')
        assert up[0]["metric"]["instance"] == target.address

        rate = server.wait_for("claude_code:cost_usd_per_hour:rate15m > 0")
        assert rate[0]["metric"] == {
            "__name__": "claude_code:cost_usd_per_hour:rate15m",
            "job": "claude-code",
            "instance": target.address,
        }
        share = server.wait_for("claude_code:cache_read_share:rate1h")
        assert sample_value(share[0]) == pytest.approx(0.9)

        # 100 USD per scrape against a 1 USD daily budget: pending (for: 5m).
        alerts = server.wait_for_alert("ClaudeCodeDailyBudgetExceeded")
        assert alerts[0]["labels"]["instance"] == target.address
        assert alerts[0]["labels"]["severity"] == "warning"
        assert "above the daily budget of 1.00 USD" in alerts[0]["annotations"]["description"]
        active = {a["labels"]["alertname"] for a in server.alerts()}
        assert "ClaudeCodeMonthlyBudgetExceeded" not in active
        assert "ClaudeCodeExporterMetricsMissing" not in active
        assert target.scrapes >= 2

        server.stop()
        assert not server.running()
