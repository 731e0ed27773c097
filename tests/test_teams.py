"""Teams at scale on real engines: 10 exporters → Prometheus → remote write → VictoriaMetrics.

``tests/support/teamstack.py`` starts ten ``claude-code-exporter serve`` processes over
their own generated trees (each with ``truth.json``), with ``user`` and ``team``
target labels, one Prometheus with the shipped config, rules and team rules
that remote-writes to a VictoriaMetrics. In the team: a person with two
machines and their own transcripts on each (ada), and a person whose laptop
reads a synced copy of his workstation's ``~/.claude`` (hal), which counts his
requests twice until someone notices: the identical-ledger rule does.

The shipped ``ClaudeCodeExporterDown`` waits ``for: 5m``; the stack loads a copy
of the alerts file with ``for: 2s`` so that the kill test takes seconds.
Scrape and evaluation intervals are 1 s (shipped: 15 s and 1 m).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import teamstack
from tests.support.dashboards import DASHBOARD_DIR, panels, query_variables
from tests.support.exposition import total
from tests.support.prometheus import PromServer, require_binary, sample_value
from tests.support.stack import append_stage
from tests.support.teamstack import JOB, Member, Spec, TeamStack
from tests.support.wait import poll

SPECS = (
    Spec("ada", "platform", 101, budget_day_usd=40.0),
    Spec("bo", "platform", 102, budget_day_usd=25.0),
    Spec("ada", "platform", 103, budget_day_usd=30.0),  # ada's laptop, her own transcripts
    Spec("cy", "web", 104, budget_day_usd=20.0),
    Spec("dee", "web", 105),  # no budget set
    Spec("eli", "web", 106, budget_day_usd=50.0, project_label="hash"),
    Spec("fay", "data", 107, budget_day_usd=10.0, project_label="none"),
    Spec("gus", "data", 108),
    Spec("hal", "data", 109, budget_day_usd=15.0),
    Spec("hal", "data", 0, copy_of=8, budget_day_usd=15.0),  # hal's laptop: a synced ~/.claude
)
SYNCED = (8, 9)
KILLED = 4  # dee's exporter
#: Daily budget per team: per person the largest of their machines', summed.
TEAM_BUDGETS = {"platform": 40.0 + 25.0, "web": 20.0 + 50.0, "data": 10.0 + 15.0}
#: Token type label → key of truth.json's totals.
TYPES = {"input": "input_tokens", "output": "output_tokens", "cache_read": "cache_read_tokens",
         "cache_write_5m": "cache_write_5m_tokens", "cache_write_1h": "cache_write_1h_tokens"}
PROMPT = 'type=~"input|cache_read|cache_write_5m|cache_write_1h"'
ALL = f'job="{JOB}"'
CENT = 0.005
WAIT_S = 45.0


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamStack]:
    """The running team stack, every exporter done reading its tree."""
    stops: list[Callable[[], object]] = []
    try:
        stack = teamstack.start(tmp_path_factory.mktemp("team"), SPECS, stops.append)
        teamstack.wait_settled(stack)
        yield stack
    finally:
        for stop in reversed(stops):
            with contextlib.suppress(Exception):
                stop()


# ------------------------------------------------------------------ helpers


BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "1m", "__range": "1d"}


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with ``$name`` and ``${name}`` replaced; an unknown variable raises KeyError."""

    def value(match: re.Match[str]) -> str:
        return values[match.group(1) or match.group(2)]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def vector(server: PromServer, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
    """An instant query's samples keyed by the values of ``labels``."""
    return {tuple(s["metric"].get(k, "") for k in labels): sample_value(s)
            for s in server.query(expr)}


def eventually(get: Callable[[], Any], want: Any, what: str,
               same: Callable[[Any, Any], bool] | None = None) -> Any:
    """Poll ``get()`` until it equals ``want`` (or ``same(got, want)``); fail showing both."""
    last: list[Any] = [None]

    def check() -> bool:
        last[0] = get()
        return same(last[0], want) if same else bool(last[0] == want)

    try:
        poll(check, WAIT_S, what)
    except AssertionError:
        pytest.fail(f"{what}:\n got  {last[0]!r}\n want {want!r}", pytrace=False)
    return last[0]


def close(tolerance: float) -> Callable[[dict[Any, float], dict[Any, float]], bool]:
    """Same keys and every value within ``tolerance`` (absolute)."""
    return lambda got, want: got.keys() == want.keys() and all(
        abs(got[k] - want[k]) <= tolerance for k in want)


def truth_sum(members: list[Member], key: Callable[[Member], tuple[str, ...]],
              value: Callable[[dict[str, Any]], float]) -> dict[tuple[str, ...], float]:
    """Sum of ``value(truth)`` over the members, grouped by ``key(member)``."""
    out: dict[tuple[str, ...], float] = {}
    for m in members:
        out[key(m)] = out.get(key(m), 0.0) + value(m.truth)
    return out


def by_user(m: Member) -> tuple[str, ...]:
    """Group key: the person."""
    return (m.spec.user,)


def by_team(m: Member) -> tuple[str, ...]:
    """Group key: the team."""
    return (m.spec.team,)


def wait_for_vm_to_hold_the_ledgers(stack: TeamStack) -> None:
    """Poll until VictoriaMetrics has every exporter's ledger row count."""
    want = {(m.address,): float(m.expected_requests) for m in stack.members}
    eventually(lambda: vector(stack.vm, f"claude_code_exporter_ledger_requests{{{ALL}}}",
                              "instance"), want, "ledger rows per exporter in VictoriaMetrics")


Counters = dict[tuple[tuple[str, str], ...], float]


def tokens_by_series(server: PromServer, member: Member) -> Counters:
    """One exporter's token counters in a store, keyed by their own labels."""
    own = {"__name__", "job", "instance", "user", "team"}
    return {tuple(sorted((k, v) for k, v in s["metric"].items() if k not in own)): sample_value(s)
            for s in server.query(f'claude_code_tokens_total{{instance="{member.address}"}}')}


def tokens_scraped(member: Member) -> Counters:
    """The same counters in one scrape of the exporter itself."""
    fam = member.daemon.scrape()["claude_code_tokens"]
    return {tuple(sorted(s.labels.items())): s.value for s in fam.samples
            if s.name == "claude_code_tokens_total"}


# ------------------------------------------------------------ static checks


def test_the_ci_team_is_big_enough_and_has_the_traps() -> None:
    """At least ten exporters, three teams, one person on two machines, one synced copy."""
    assert len(SPECS) >= 10
    assert {s.team for s in SPECS} == set(TEAM_BUDGETS)
    assert [s.user for s in SPECS].count("ada") == 2
    assert SPECS[SYNCED[1]].copy_of == SYNCED[0]
    assert {s.project_label for s in SPECS} == {"basename", "hash", "none"}


def test_alerts_copy_changes_only_the_down_alerts_wait(tmp_path: Path) -> None:
    """The test copy of the alerts file differs from the shipped one in one ``for:`` only."""
    shipped = yaml.safe_load(teamstack.ALERTS_FILE.read_text())
    copy = yaml.safe_load(teamstack.alerts_copy(tmp_path, "2s").read_text())
    down = [r for g in shipped["groups"] for r in g["rules"]
            if r.get("alert") == "ClaudeCodeExporterDown"]
    assert [r["for"] for r in down] == ["5m"]
    for group in copy["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "ClaudeCodeExporterDown":
                assert rule.pop("for") == "2s"
                down[0].pop("for")
    assert copy == shipped
    assert teamstack.alerts_copy(tmp_path, None) == teamstack.ALERTS_FILE


def dry_run(vmalert: str, *files: Path) -> subprocess.CompletedProcess[str]:
    """``vmalert -dryRun``: parse the rule files (expressions as MetricsQL), run nothing."""
    return subprocess.run([vmalert, "-dryRun", "-loggerLevel=ERROR",
                           *(f"-rule={f}" for f in files)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_vmalert_accepts_every_shipped_rule_file(tmp_path: Path) -> None:
    """Vmalert (same package) parses every shipped rule file, and rejects a broken expression."""
    vmalert = require_binary("vmalert")
    files = sorted(teamstack.RULES_DIR.glob("*.yml"))
    assert teamstack.TEAM_FILE in files
    proc = dry_run(vmalert, *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = tmp_path / "broken.yml"
    text = teamstack.TEAM_FILE.read_text()
    assert "(claude_code:cost_usd:increase1d)" in text
    broken.write_text(text.replace("(claude_code:cost_usd:increase1d)",
                                   "(claude_code:cost_usd:increase1d", 1))
    proc = dry_run(vmalert, broken)
    assert proc.returncode != 0
    assert "claude_code:user_cost_usd:increase1d" in proc.stdout + proc.stderr


# ------------------------------------------------------------- the stack


def test_prometheus_scrapes_every_exporter_with_its_labels(team: TeamStack) -> None:
    """One target per exporter in job claude-code, each up, with its user and team."""
    def all_up() -> list[dict[str, Any]] | None:
        targets = team.prom.targets()
        return targets if all(t["health"] == "up" for t in targets) else None

    targets = poll(all_up, WAIT_S, "every target up")
    seen = sorted((t["labels"]["instance"], t["labels"]["user"], t["labels"]["team"])
                  for t in targets)
    assert seen == sorted((m.address, m.spec.user, m.spec.team) for m in team.members)
    assert {t["labels"]["job"] for t in targets} == {JOB}


def test_per_user_totals_in_victoria_metrics_equal_the_ledgers(team: TeamStack) -> None:
    """Tokens by type to the token, requests exactly and USD to the cent, per person."""
    wait_for_vm_to_hold_the_ledgers(team)
    tokens: dict[tuple[str, ...], float] = {}
    for m in team.members:
        for label, key in TYPES.items():
            tokens[(m.spec.user, label)] = tokens.get((m.spec.user, label), 0) + m.truth[
                "totals"][key]
    expr = f"sum by (user, type) (claude_code_tokens_total{{{ALL}}})"
    eventually(lambda: vector(team.vm, expr, "user", "type"), tokens, "tokens per person")
    requests = truth_sum(team.members, by_user, lambda t: t["totals"]["requests"])
    got = vector(team.vm, f"sum by (user) (claude_code_requests_total{{{ALL}}})", "user")
    assert got == requests
    cost = truth_sum(team.members, by_user, lambda t: t["totals"]["cost_usd"])
    got = vector(team.vm, f"sum by (user) (claude_code_cost_usd_total{{{ALL}}})", "user")
    assert close(CENT)(got, cost), (got, cost)
    # hal's synced laptop doubles his figures: the sum of two identical ledgers.
    hal = team.members[SYNCED[0]].truth["totals"]
    assert requests[("hal",)] == 2 * hal["requests"]
    # Prometheus, which wrote them, has the same numbers.
    assert vector(team.prom, expr, "user", "type") == tokens


def test_team_queries_run_on_victoria_metrics(team: TeamStack) -> None:
    """Cost per team, cache-read share per team, tokens by model for the org: equal to the truth."""
    wait_for_vm_to_hold_the_ledgers(team)
    cost = truth_sum(team.members, by_team, lambda t: t["totals"]["cost_usd"])
    eventually(lambda: vector(team.vm, f"sum by (team) (claude_code_cost_usd_total{{{ALL}}})",
                              "team"), cost, "USD per team", close(CENT))

    def prompt(t: dict[str, Any]) -> float:
        return float(sum(t["totals"][TYPES[k]] for k in TYPES if k != "output"))

    read = truth_sum(team.members, by_team, lambda t: t["totals"]["cache_read_tokens"])
    share = {k: read[k] / v for k, v in truth_sum(team.members, by_team, prompt).items()}
    expr = (f'sum by (team) (claude_code_tokens_total{{{ALL}, type="cache_read"}}) / '
            f"sum by (team) (claude_code_tokens_total{{{ALL}, {PROMPT}}})")
    got = vector(team.vm, expr, "team")
    assert close(1e-12)(got, share), (got, share)
    assert all(0.5 < v < 1 for v in got.values())

    models: dict[tuple[str, ...], float] = {}
    for m in team.members:
        for model, figures in m.truth["by_model"].items():
            models[(model,)] = models.get((model,), 0) + sum(figures[k] for k in TYPES.values())
    got = vector(team.vm, f"sum by (model) (claude_code_tokens_total{{{ALL}}})", "model")
    assert got == models
    assert len(models) >= 3


def test_team_rules_are_evaluated_and_remote_written(team: TeamStack) -> None:
    """Team budgets and per-person spend reach VictoriaMetrics; the synced copy is flagged."""
    budgets = {(t,): v for t, v in TEAM_BUDGETS.items()}
    eventually(lambda: vector(team.vm, f'claude_code:team_budget_usd:sum{{{ALL}, period="day"}}',
                              "team"), budgets, "team budgets in VictoriaMetrics")
    users = {(s.team, s.user) for s in SPECS}
    eventually(lambda: set(vector(team.vm, "claude_code:user_cost_usd:increase1d", "team",
                                  "user")), users, "per-person spend rule in VictoriaMetrics")
    synced = {(team.members[i].address, "hal"): 2.0 for i in SYNCED}
    eventually(lambda: vector(team.vm, "claude_code:identical_ledgers:count", "instance", "user"),
               synced, "identical ledgers")
    alerts = team.prom.wait_for_alert("ClaudeCodeIdenticalLedgers", timeout=WAIT_S)
    assert sorted(a["labels"]["instance"] for a in alerts) == sorted(a for a, _ in synced)
    assert {a["labels"]["severity"] for a in alerts} == {"warning"}


# ------------------------------------------------------- the team dashboard


_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")


def listed(server: PromServer, query: str) -> list[str]:
    """What Grafana lists for a ``label_values(selector, label)`` variable on ``server``."""
    match = _LABEL_VALUES.match(query)
    assert match, query
    selector = substitute(match.group(1), {"job": ".*", "instance": ".*", "user": ".*"})
    series = server.api("series", {"match[]": selector})
    return sorted({s[match.group(2)] for s in series if match.group(2) in s})


def live_stage(stack: TeamStack) -> None:
    """Append requests stamped now to every tree (the synced copy gets the same bytes)."""
    now = time.time()
    for m in stack.members:
        m.appended += append_stage(m.tree, "live", now, ((0, False),))


def instant(server: PromServer, expr: str, at: float) -> list[Any]:
    """An instant query evaluated at ``at`` (unix seconds)."""
    result: list[Any] = server.api("query", {"query": expr, "time": str(at)})["result"]
    return result


def range_query(server: PromServer, expr: str, end: float) -> Any:
    """A graph's query over the minute before ``end``, a point every 5 s."""
    return server.api("query_range", {"query": expr, "start": str(end - 60), "end": str(end),
                                      "step": "5"})


def test_team_dashboard_works_on_prometheus_and_victoria_metrics(team: TeamStack) -> None:
    """Each team dashboard query gives the same series on both engines; so do the variables."""
    board = json.loads((DASHBOARD_DIR / "claude-code-team.json").read_text())
    live_stage(team)
    teamstack.wait_settled(team)
    wait_for_vm_to_hold_the_ledgers(team)
    # Both engines answer for one moment, shortly after the live requests: a
    # VictoriaMetrics range query's last seconds lag behind its instant queries.
    end = time.time() + 2
    rows = {(m.address,): float(m.expected_requests) for m in team.members}
    ledgers = f"claude_code_exporter_ledger_requests{{{ALL}}}"

    def rows_at_end(server: PromServer) -> dict[tuple[str, ...], float] | None:
        if time.time() < end + 1:
            return None  # not yet: ``end`` must be in the past
        return {(s["metric"]["instance"],): sample_value(s) for s in instant(server, ledgers, end)}

    for server in (team.prom, team.vm):
        eventually(partial(rows_at_end, server), rows, f"{server.url} holds the live requests")
    for variable in query_variables(board):
        on_prom, on_vm = listed(team.prom, variable["query"]), listed(team.vm, variable["query"])
        assert on_prom == on_vm and on_prom, (variable["name"], on_prom, on_vm)
    values = {**BUILTIN_VARIABLES, **{v["name"]: ".*" for v in query_variables(board)}}
    failures, count = [], 0
    for panel in panels(board):
        for target in panel["targets"]:
            count += 1
            expr = substitute(target["expr"], values)
            where = (panel["title"], target["refId"])
            if target.get("instant"):
                prom, vm = instant(team.prom, expr, end), instant(team.vm, expr, end)
            else:
                prom = range_query(team.prom, expr, end)["result"]
                vm = range_query(team.vm, expr, end)["result"]
            labels = [sorted(tuple(sorted(s["metric"].items())) for s in r) for r in (prom, vm)]
            if not prom or not vm:
                failures.append((*where, f"no data: prometheus {len(prom)}, vm {len(vm)}"))
            elif labels[0] != labels[1]:
                failures.append((*where, f"series differ: {labels[0]} != {labels[1]}"))
            elif "[" not in expr and target.get("instant"):
                got = {tuple(sorted(s["metric"].items())): sample_value(s) for s in vm}
                want = {tuple(sorted(s["metric"].items())): sample_value(s) for s in prom}
                if not close(1e-9 * max(1.0, *map(abs, want.values())))(got, want):
                    failures.append((*where, f"values differ: {want} != {got}"))
    assert not failures, "\n".join(map(str, failures))
    assert count >= 25


# ------------------------------------------------------- kill and restart


def test_a_killed_exporter_raises_its_alert_and_keeps_its_history(team: TeamStack) -> None:
    """SIGKILL one exporter: ExporterDown fires for it alone; restarted, nothing counted is lost."""
    victim = team.members[KILLED]
    selector = f'instance="{victim.address}"'
    requests = f"sum(claude_code_requests_total{{{selector}}})"
    before = eventually(lambda: tokens_by_series(team.vm, victim), tokens_scraped(victim),
                        "the victim's counters in VictoriaMetrics")
    requests_before = sample_value(team.vm.query(requests)[0])
    caught_up = time.time()  # VictoriaMetrics' latest samples of the victim are `before`
    assert sum(before.values()) > 0

    victim.kill()
    down = team.prom.wait_for_alert("ClaudeCodeExporterDown", states=("firing",), timeout=WAIT_S)
    assert [(a["labels"]["instance"], a["labels"]["user"], a["labels"]["team"]) for a in down] == [
        (victim.address, victim.spec.user, victim.spec.team)]
    eventually(lambda: vector(team.vm, f"up{{{selector}}}"), {(): 0.0},
               "up == 0 in VictoriaMetrics")
    # Claude Code keeps writing while the exporter is down.
    added = append_stage(victim.tree, "down", time.time(), ((0, False),))
    assert added > 0
    victim.appended += added

    victim.start()
    fams = poll(lambda: teamstack.settled(victim), WAIT_S, "restarted exporter caught up")
    assert total(fams, "claude_code_requests") == requests_before + added
    after = eventually(lambda: tokens_by_series(team.vm, victim), tokens_scraped(victim),
                       "the victim's counters in VictoriaMetrics after the restart")
    assert after.keys() == before.keys()
    assert all(after[k] >= before[k] for k in before)  # counters resumed from the ledger, not 0
    assert sum(after.values()) > sum(before.values())
    assert sample_value(team.vm.query(requests)[0]) == requests_before + added
    # VictoriaMetrics' increase() is the exact growth since the sample before the window.
    now = time.time()
    window = f"[{int((now - caught_up) * 1000)}ms]"
    grown = instant(team.vm, f"sum(increase(claude_code_requests_total{{{selector}}}{window}))",
                    now)
    assert sample_value(grown[0]) == added
    for server in (team.vm, team.prom):
        resets = server.query(f"sum(resets(claude_code_tokens_total{{{selector}}}[10m]))")
        assert sample_value(resets[0]) == 0, server.url
    poll(lambda: not [a for a in team.prom.alerts()
                      if a["labels"]["alertname"] == "ClaudeCodeExporterDown"],
         WAIT_S, "ExporterDown resolved")
    # The person's total in the team figures: the ledger's, nothing lost, nothing twice.
    person = vector(team.vm, f'sum(claude_code_requests_total{{{ALL}, user="{victim.spec.user}"}})')
    assert person == {(): requests_before + added}
