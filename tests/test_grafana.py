"""The Grafana dashboards and provisioning of ``grafana/``.

Static checks: the committed JSON is the generator's output, every panel has
an id, a unit, a description and the data source variable, every metric a
query names exists, every selector carries the target filters, provisioning
points at the files. Live checks (``tests/stack.py``: a real Prometheus with
the shipped rules scraping the real exporter, with two hours of history): every
panel and variable query, its variables substituted, is accepted by Prometheus
and returns data.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.daemon_proc import total
from tests.promserver import sample_value
from tests.stack import DEAD_USER, JOB, RECORDING_FILE, TEAM, USER, Stack, shared_stack

ROOT = Path(__file__).resolve().parent.parent
GRAFANA = ROOT / "grafana"
DASHBOARD_DIR = GRAFANA / "dashboards"
PROVISIONING = GRAFANA / "provisioning"
GOLDEN = ROOT / "tests" / "golden" / "exposition.txt"
DOCS = ROOT / "docs" / "grafana.md"

#: Where docs/grafana.md tells a container to mount the repository's directories.
MOUNTS = {
    "/etc/grafana/provisioning": PROVISIONING,
    "/var/lib/grafana/dashboards/claude-code": DASHBOARD_DIR,
}
#: Series Prometheus makes itself, which dashboards may use.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "ALERTS"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TARGET_FILTERS = ('job=~"$job"', 'instance=~"$instance"', 'user=~"$user"')
#: Grafana's built-in variables, as a dashboard with the default range (24 h)
#: and a 15 s scrape interval would set them.
BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "1m", "__range": "1d"}
GRID_COLUMNS = 24


# ----------------------------------------------------------------- helpers


def dashboards() -> dict[str, dict[str, Any]]:
    """The committed dashboards by file name."""
    return {p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that shows data (rows excluded), including panels inside rows."""
    found = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            found += panel.get("panels", [])
        else:
            found.append(panel)
    return found


def targets() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(dashboard file, panel title, query) for every query of every dashboard."""
    for name, board in dashboards().items():
        for panel in panels(board):
            for target in panel["targets"]:
                yield name, panel["title"], target


def query_variables(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's query variables."""
    return [v for v in board["templating"]["list"] if v["type"] == "query"]


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NAME = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on",
             "ignoring", "group_left", "group_right"}
_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects.

    Strings, label matchers, range brackets and grouping clauses are removed;
    what remains that is an identifier not followed by ``(`` (a function or an
    aggregation) and not a keyword is a metric name.
    """
    text = _STRING.sub('""', expr)
    text = _BRACES.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {m for m in _NAME.findall(text) if m not in _KEYWORDS}


def unknown_metrics(board: dict[str, Any], known: set[str]) -> list[tuple[str, str]]:
    """(panel or variable, name) for every metric a dashboard names that ``known`` lacks."""
    missing = []
    for panel in panels(board):
        for target in panel["targets"]:
            missing += [(panel["title"], n) for n in metric_names(target["expr"]) - known]
    for variable in query_variables(board):
        match = _LABEL_VALUES.match(variable["query"])
        names = metric_names(match.group(1)) if match else {variable["query"]}
        missing += [(f"${variable['name']}", n) for n in names - known]
    return missing


def unfiltered(expr: str) -> list[str]:
    """Metric references in ``expr`` that lack a ``{...}`` with all the target filters."""
    bad = []
    for name in metric_names(expr):
        for match in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^{{}}]*\}})?", expr):
            matchers = match.group(1) or ""
            if not all(f in matchers for f in TARGET_FILTERS):
                bad.append(match.group(0))
    return bad


def exposition_names(text: str) -> set[str]:
    """Sample names of an exposition text (``_bucket``, ``_total`` ... included)."""
    return {line.split("{")[0].split()[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def rule_names() -> set[str]:
    """The names the shipped recording rules record."""
    doc = yaml.safe_load(RECORDING_FILE.read_text())
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with ``$name`` and ``${name}`` replaced; an unknown variable raises KeyError."""

    def value(match: re.Match[str]) -> str:
        return values[match.group(1) or match.group(2)]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def require_sdk() -> None:
    """Skip when the Grafana Foundation SDK is missing, but fail under CI."""
    try:
        import grafana_foundation_sdk  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("grafana-foundation-sdk is not installed (test extra); CI is set")
        pytest.skip("grafana-foundation-sdk is not installed")


# ------------------------------------------------------------ static checks


def test_committed_dashboards_equal_the_generator_output() -> None:
    """Every JSON file in grafana/dashboards is exactly what grafana/build.py generates."""
    require_sdk()
    from grafana import build

    assert metadata.version("grafana-foundation-sdk") == build.SDK_VERSION, (
        "install the pinned SDK (test extra)")
    generated = build.render_all()
    committed = {p.name: p.read_text(encoding="utf-8") for p in DASHBOARD_DIR.glob("*.json")}
    assert sorted(committed) == sorted(generated)
    stale = [name for name, text in generated.items() if committed[name] != text]
    assert not stale, f"stale dashboards {stale}: run python3 -m grafana.build"
    assert build.main(["--check"]) == 0


def test_dashboards_have_unique_ids_and_a_valid_grid() -> None:
    """Uids are unique, panel ids are unique per dashboard, panels fit the grid without overlap."""
    boards = dashboards()
    assert len(boards) == 5
    uids = [b["uid"] for b in boards.values()]
    assert len(set(uids)) == len(uids)
    for name, board in boards.items():
        ids = [p["id"] for p in board["panels"]] + [
            p["id"] for row in board["panels"] for p in row.get("panels", [])]
        assert len(ids) == len(set(ids)), name
        assert all(isinstance(i, int) and i > 0 for i in ids), name
        cells: dict[tuple[int, int], int] = {}
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= GRID_COLUMNS, (name, panel["title"])
            for x in range(pos["x"], pos["x"] + pos["w"]):
                for y in range(pos["y"], pos["y"] + pos["h"]):
                    assert (x, y) not in cells, (name, panel["title"], cells.get((x, y)))
                    cells[(x, y)] = panel["id"]
        assert "claude-code" in board["tags"], name


def test_every_panel_has_unit_description_and_the_datasource_variable() -> None:
    """Each panel sets a unit and a description and queries through ``${datasource}``."""
    for name, board in dashboards().items():
        for panel in panels(board):
            where = (name, panel["title"])
            assert panel["fieldConfig"]["defaults"].get("unit"), where
            assert len(panel.get("description", "")) > 20, where
            assert panel["datasource"] == DATASOURCE, where
            assert panel["targets"], where
            refs = [t["refId"] for t in panel["targets"]]
            assert len(set(refs)) == len(refs) and all(refs), where
            for target in panel["targets"]:
                assert target["datasource"] == DATASOURCE, where
                assert target["expr"].strip(), where


def test_every_dashboard_has_datasource_and_target_variables() -> None:
    """Each dashboard has a Prometheus data source variable and job/instance/user filters."""
    for name, board in dashboards().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        source = variables["datasource"]
        assert (source["type"], source["query"]) == ("datasource", "prometheus"), name
        for var in ("job", "instance", "user"):
            v = variables[var]
            assert (v["includeAll"], v["multi"], v["allValue"]) == (True, True, ".*"), (name, var)
        for v in query_variables(board):
            assert v["datasource"] == DATASOURCE, (name, v["name"])
            assert _LABEL_VALUES.match(v["query"]), (name, v["name"])


def test_every_metric_selector_carries_the_target_filters() -> None:
    """Every metric a panel reads is filtered by job, instance and user (fleet-safe)."""
    bad = [(name, title, ref) for name, title, t in targets() for ref in unfiltered(t["expr"])]
    assert not bad, bad


def test_metric_names_exist_in_the_exposition_or_the_rules() -> None:
    """Every metric named by a panel or variable is exported, recorded, or Prometheus's own."""
    known = exposition_names(GOLDEN.read_text()) | rule_names() | PROMETHEUS_SERIES
    missing = {name: unknown_metrics(board, known) for name, board in dashboards().items()}
    assert not any(missing.values()), missing
    used = {n for _, _, t in targets() for n in metric_names(t["expr"])}
    assert len(used & rule_names()) >= 12, "dashboards should use the recording rules"


def test_an_unknown_metric_name_is_reported() -> None:
    """The name check catches a typo in a panel query and in a variable query."""
    board = json.loads(json.dumps(dashboards()["claude-code-usage.json"]))
    known = exposition_names(GOLDEN.read_text()) | rule_names() | PROMETHEUS_SERIES
    assert unknown_metrics(board, known) == []
    panel = panels(board)[0]
    panel["targets"][0]["expr"] = (
        'sum by (model) (rate(claude_code_cost_usd_totl{job=~"$job"}[$__rate_interval])) '
        "/ on () group_left () scalar(up)")
    query_variables(board)[0]["query"] = "label_values(claude_code_no_such_info, job)"
    assert sorted(n for _, n in unknown_metrics(board, known)) == [
        "claude_code_cost_usd_totl", "claude_code_no_such_info"]
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(x_bucket{a="b(c)"}[5m])))'
                        ' * 8 / 400e9 or vector(0)') == {"x_bucket"}


def test_provisioning_files_parse_and_point_at_the_dashboards() -> None:
    """The data source and dashboard provider YAML are valid and their paths exist once mounted."""
    sources = yaml.safe_load((PROVISIONING / "datasources" / "claude-code.yml").read_text())
    assert sources["apiVersion"] == 1
    (source,) = sources["datasources"]
    assert (source["type"], source["access"], source["isDefault"]) == ("prometheus", "proxy", True)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", source["url"])
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "claude-code.yml").read_text())
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    mounted = provider["options"]["path"]
    local = next(MOUNTS[m] / Path(mounted).relative_to(m) for m in MOUNTS
                 if mounted == m or mounted.startswith(m + "/"))
    assert sorted(p.name for p in local.glob("*.json")) == sorted(dashboards())
    for directory in ("datasources", "dashboards"):
        assert (MOUNTS["/etc/grafana/provisioning"] / directory).is_dir()


def test_docs_describe_every_dashboard_and_how_to_mount_it() -> None:
    """docs/grafana.md names each dashboard and gives the mounts provisioning expects."""
    text = DOCS.read_text(encoding="utf-8")
    for board in dashboards().values():
        assert board["title"] in text, board["title"]
    for container, local in MOUNTS.items():
        assert f"{local.relative_to(ROOT)}:{container}" in text, container
    assert "python3 -m grafana.build" in text


# -------------------------------------------------------------- live checks


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Stack:
    """The shared stack, with requests appended just now (active sessions, 5-minute rates)."""
    shared = shared_stack(request, tmp_path_factory)
    shared.live_stage()
    return shared


def label_values(stack: Stack, query: str) -> list[str]:
    """What Grafana lists for a ``label_values(selector, label)`` variable query."""
    match = _LABEL_VALUES.match(query)
    assert match, query
    selector = substitute(match.group(1), {k: ".*" for k in ("job", "instance", "user")})
    series = stack.prom.api("series", {"match[]": selector})
    return sorted({s[match.group(2)] for s in series if match.group(2) in s})


def variable_values(stack: Stack, board: dict[str, Any]) -> dict[str, str]:
    """Values for every variable: ``.*`` for "All", else the first value Prometheus lists."""
    values = dict(BUILTIN_VARIABLES)
    for variable in query_variables(board):
        if variable.get("includeAll"):
            values[variable["name"]] = ".*"
        else:
            listed = label_values(stack, variable["query"])
            assert listed, variable["name"]
            values[variable["name"]] = listed[0]
    return values


def test_variable_queries_list_the_exporters(stack: Stack) -> None:
    """Each variable query lists values: both targets, both users, models, projects, archs."""
    seen: dict[str, list[str]] = {}
    for name, board in dashboards().items():
        for variable in query_variables(board):
            listed = label_values(stack, variable["query"])
            assert listed, (name, variable["name"])
            seen[variable["name"]] = listed
    assert seen["job"] == [JOB]
    assert seen["instance"] == sorted([stack.address, stack.dead_address])
    assert seen["user"] == sorted([USER, DEAD_USER])
    assert seen["team"] == [TEAM]
    assert seen["arch"] == ["gqa", "mla"]
    models = {s.labels["model"] for s in stack.final["claude_code_requests"].samples}
    assert set(seen["model"]) == models
    assert len(seen["project"]) >= 2


def test_every_panel_query_is_accepted_and_returns_data(stack: Stack) -> None:
    """Each panel query, variables substituted, parses in Prometheus and returns samples."""
    failures, count = [], 0
    for name, board in dashboards().items():
        values = variable_values(stack, board)
        for panel in panels(board):
            for target in panel["targets"]:
                count += 1
                expr = substitute(target["expr"], values)
                try:
                    result = stack.prom.query(expr)
                except RuntimeError as exc:
                    failures.append((name, panel["title"], target["refId"], str(exc)))
                    continue
                if not result:
                    failures.append((name, panel["title"], target["refId"], "no data: " + expr))
    assert not failures, "\n".join(map(str, failures))
    assert count >= 80


def test_time_series_queries_return_data_over_a_range(stack: Stack) -> None:
    """Range queries (graphs, sparklines, heatmaps) return series over the last half hour."""
    end = time.time()
    failures = []
    for name, board in dashboards().items():
        values = variable_values(stack, board)
        for panel in panels(board):
            for target in panel["targets"]:
                if target.get("instant"):
                    continue
                data = stack.prom.api("query_range", {
                    "query": substitute(target["expr"], values), "start": str(end - 1800),
                    "end": str(end), "step": "60"})
                if not data["result"]:
                    failures.append((name, panel["title"], target["refId"]))
    assert not failures, failures


def test_metric_names_exist_in_the_live_exporter(stack: Stack) -> None:
    """Every metric the dashboards name is in the real daemon's /metrics or the rules."""
    known = {s.name for fam in stack.final.values() for s in fam.samples}
    known |= rule_names() | PROMETHEUS_SERIES
    missing = {name: unknown_metrics(board, known) for name, board in dashboards().items()}
    assert not any(missing.values()), missing


def test_seed_table_agrees_with_the_recording_rule(stack: Stack) -> None:
    """The seed's gap table agrees with the recording rule, the exporter and the gap histogram."""
    board = dashboards()["claude-code-cache.json"]
    (table,) = [p for p in panels(board) if p["title"].startswith("Idle gap and cache rewrite")]
    target = next(t for t in table["targets"] if "prompt_tokens_after_gap" in t["expr"])
    values = variable_values(stack, board)
    panel = {s["metric"]["gap"]: sample_value(s)
             for s in stack.prom.query(substitute(target["expr"], values))}
    rule = {s["metric"]["gap"]: sample_value(s) for s in stack.prom.query(
        f'claude_code:cache_write_share_by_gap:rate1d{{instance="{stack.address}"}}')}
    assert set(panel) == set(rule) >= {"lt_5m", "5m_to_1h", "gt_1h"}
    for gap, share in rule.items():
        assert panel[gap] == pytest.approx(share, rel=1e-3), gap
    # The exporter's own count of requests after > 1 h idle is what the table counts.
    requests = next(t for t in table["targets"] if t["refId"] == "A")
    counted = {s["metric"]["gap"]: sample_value(s)
               for s in stack.prom.query(substitute(requests["expr"], values))}
    grown = (total(stack.final, "claude_code_requests_after_gap", gap="gt_1h")
             - total(stack.initial, "claude_code_requests_after_gap", gap="gt_1h"))
    assert counted["gt_1h"] == pytest.approx(grown, rel=0.02)
    # The gap shares of the table (counters) and of the stats (histogram) agree.
    shares = next(t for t in table["targets"] if t["refId"] == "B")
    by_counter = {s["metric"]["gap"]: sample_value(s)
                  for s in stack.prom.query(substitute(shares["expr"], values))}
    stats = {p["title"]: p["targets"][0]["expr"] for p in panels(board) if p["type"] == "stat"}
    for title, share in (("Gaps ≤ 5 min", by_counter["lt_5m"]),
                         ("Gaps > 1 h", by_counter["gt_1h"])):
        (sample,) = stack.prom.query(substitute(stats[title], values))
        assert sample_value(sample) == pytest.approx(share, rel=0.02), title
