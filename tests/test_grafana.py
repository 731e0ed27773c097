"""The Grafana dashboards and provisioning of ``grafana/``, and the dashboards as drawn.

Static checks: the committed JSON is the generator's output, every panel has
an id, a unit, a description and the data source variable, every metric a
query names exists, every selector carries the target filters, counted figures
are rounded, a panel that ignores ``$model`` or ``$project`` says so,
provisioning points at the files.

Live checks (``tests/support/dashboard_stack.py``: a real Prometheus after the steps of
docs/backfill.md, four days of generated history backfilled, the recording
rules backfilled with the documented command, the real exporter scraped next to
a down exporter and a failing blackbox probe): ``grafana.render`` runs every
panel's queries as Grafana would and draws the four dashboards; no panel is
empty or all zero, no count is fractional, no ``up`` of another job is counted,
and the figures agree with the exporter's counters.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from exporter.projections.plan.gauges import ALL_FAMILIES
from grafana import render
from grafana.draw import table_cells
from grafana.query import (
    PanelData,
    Prometheus,
    Result,
    Series,
    Variables,
    builtins,
    date_math,
    deaccumulate,
    problems,
    regex_escape,
    run_query,
    table,
    window,
)
from tests.support import dashboard_stack
from tests.support.dashboard_stack import (
    DEAD_USER,
    INSTANCE,
    JOB,
    RECORDING_FILE,
    USER,
    HistoryStack,
)
from tests.support.dashboards import DASHBOARD_DIR, panels, query_variables
from tests.support.paths import ROOT
from tests.support.prometheus import sample_value

GRAFANA = ROOT / "grafana"
PROVISIONING = GRAFANA / "provisioning"
GOLDEN = ROOT / "tests" / "golden" / "exposition.txt"
#: The exposition with Codex's families (present once a Codex turn is counted).
CODEX_GOLDEN = ROOT / "tests" / "golden" / "exposition_codex.txt"
COST = "claude_code_cost_usd_total"
DOCS = ROOT / "docs" / "grafana.md"

#: Where docs/grafana.md tells a container to mount the repository's directories.
MOUNTS = {
    "/etc/grafana/provisioning": PROVISIONING,
    "/var/lib/grafana/dashboards/claude-code": DASHBOARD_DIR,
}
#: Series Prometheus makes itself, which dashboards may use.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "ALERTS"}
#: The plan-limit families: exposed by serve once the status line recorded a sample, so
#: not in the golden exposition of a ledger without samples (tests/test_plan_metrics.py).
PLAN_SERIES = {f.exposed() for f in ALL_FAMILIES}  # Codex's too: absent from the goldens
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TARGET_FILTERS = ('job=~"$job"', 'instance=~"$instance"', 'user=~"$user"')
GRID_COLUMNS = 24
#: The dashboards of this module (other modules of grafana/ may add more).
OWN = ("claude-code-usage.json", "claude-code-cache.json", "claude-code-serving.json",
       "claude-code-exporter.json")
IMAGES = ROOT / "docs" / "img"
COUNT_UNITS = {"short", "none", "count:tok"}


# ----------------------------------------------------------------- helpers


def dashboards() -> dict[str, dict[str, Any]]:
    """The committed dashboards by file name."""
    return {p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def rows_of(board: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(title of the row above it, panel) for every panel that queries data."""
    title = ""
    for panel in board["panels"]:
        if panel["type"] == "row":
            title = panel["title"]
        elif panel["type"] != "text":
            yield title, panel


def targets() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(dashboard file, panel title, query) for every query of every dashboard."""
    for name, board in dashboards().items():
        for panel in panels(board):
            for target in panel["targets"]:
                yield name, panel["title"], target


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
    assert set(OWN) <= set(boards)
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
    """Each data panel sets a unit and a description and queries through ``${datasource}``."""
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
    """A Prometheus data source variable and job/instance/user filters; "All" jobs are exporters'.

    ``job`` has no ``allValue``: "All" is the list of jobs whose targets expose
    the exporter's build_info, so ``up{job=~"$job"}`` never counts a blackbox
    probe or another job. ``instance`` and ``user`` are within those jobs.
    """
    for name, board in dashboards().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        source = variables["datasource"]
        assert (source["type"], source["query"]) == ("datasource", "prometheus"), name
        job = variables["job"]
        assert (job["includeAll"], job["multi"], job.get("allValue")) == (True, True, None), name
        assert "claude_code_exporter_build_info" in job["query"], name
        for var in ("instance", "user"):
            v = variables[var]
            assert (v["includeAll"], v["multi"], v["allValue"]) == (True, True, ".*"), (name, var)
            assert 'job=~"$job"' in v["query"], (name, var)
        for v in query_variables(board):
            assert v["datasource"] == DATASOURCE, (name, v["name"])
            assert _LABEL_VALUES.match(v["query"]), (name, v["name"])


def test_every_metric_selector_carries_the_target_filters() -> None:
    """Every metric a panel reads is filtered by job, instance and user (fleet-safe)."""
    bad = [(name, title, ref) for name, title, t in targets() for ref in unfiltered(t["expr"])]
    assert not bad, bad


def test_metric_names_exist_in_the_exposition_or_the_rules() -> None:
    """Every metric named by a panel or variable is exported, recorded, or Prometheus's own."""
    known = (exposition_names(GOLDEN.read_text()) | exposition_names(CODEX_GOLDEN.read_text())
             | rule_names() | PROMETHEUS_SERIES | PLAN_SERIES)
    missing = {name: unknown_metrics(board, known) for name, board in dashboards().items()}
    assert not any(missing.values()), missing



def test_dashboards_read_no_recorded_series() -> None:
    """The four dashboards read the exporter's own series only: right from a backfill's first day.

    A recorded series has no past until the rules are backfilled too, so a
    panel built on one is an empty axis with a stub at the right edge.
    """
    recorded = rule_names()
    used = {(name, title): metric_names(t["expr"]) & recorded for name, title, t in targets()
            if name in OWN}
    assert not {k: v for k, v in used.items() if v}
    assert len(used) >= 50  # panels


def test_counted_figures_are_rounded() -> None:
    """A panel (or table column) that counts things rounds every increase() it shows."""
    bad = []
    for name, board in dashboards().items():
        for panel in panels(board):
            units = {o["matcher"]["options"]: p["value"]
                     for o in panel["fieldConfig"].get("overrides", [])
                     for p in o["properties"] if p["id"] == "unit"}
            renames: dict[str, str] = next(
                (t["options"]["renameByName"] for t in panel.get("transformations", [])
                 if t["id"] == "organize"), {})
            for target in panel["targets"]:
                column = renames.get(f"Value #{target['refId']}")
                unit = units.get(column) if panel["type"] == "table" else (
                    panel["fieldConfig"]["defaults"]["unit"])
                if unit in COUNT_UNITS and "increase(" in target["expr"] and (
                        "round(" not in target["expr"]):
                    bad.append((name, panel["title"], target["refId"]))
    assert not bad, bad


def test_panels_that_ignore_model_or_project_say_so() -> None:
    """Where a dashboard has $model / $project, a panel that does not filter on it says so."""
    silent = []
    for name, board in dashboards().items():
        names = {v["name"] for v in board["templating"]["list"]}
        for row_title, panel in rows_of(board):
            exprs = " ".join(t["expr"] for t in panel["targets"])
            context = " ".join((row_title, panel["title"], panel["description"])).lower()
            for var in ("model", "project") if name in OWN else ():
                if var not in names or f'{var}=~"${var}"' in exprs:
                    continue
                told = (f"all {var}s" in context or "models and projects" in context
                        or (f"${var}" in context and "not apply" in context))
                if not told:
                    silent.append((name, panel["title"], var))
    assert not silent, silent


def test_an_unknown_metric_name_is_reported() -> None:
    """The name check catches a typo in a panel query and in a variable query."""
    board = json.loads(json.dumps(dashboards()["claude-code-usage.json"]))
    known = (exposition_names(GOLDEN.read_text()) | exposition_names(CODEX_GOLDEN.read_text())
             | rule_names() | PROMETHEUS_SERIES | PLAN_SERIES)
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
    assert "python3 -m grafana.render" in text
    for name in OWN:
        png = IMAGES / name.replace(".json", ".png")
        assert png.is_file() and png.stat().st_size > 50_000, png
        assert str(png.relative_to(DOCS.parent)) in text, png


# ------------------------------------------------- the renderer's arithmetic


def test_relative_times_and_step_alignment_follow_the_time_zone() -> None:
    """now/d is local midnight; daily steps align to it, as Grafana's utcOffsetSec does."""
    zone = ZoneInfo("Asia/Kolkata")  # UTC+05:30: a day is not a multiple of 86400 in UTC
    now = datetime(2026, 12, 1, 15, 40, tzinfo=zone)
    assert date_math("now/d", now) == datetime(2026, 12, 1, tzinfo=zone)
    assert date_math("now-29d/d", now) == datetime(2026, 11, 2, tzinfo=zone)
    assert date_math("now-24h", now) == datetime(2026, 11, 30, 15, 40, tzinfo=zone)
    board = {"time": {"from": "now-24h", "to": "now"}}
    daily = window(board, {"timeFrom": "now-29d/d", "interval": "1d", "gridPos": {"w": 24}}, now)
    start, end = daily.aligned()
    assert datetime.fromtimestamp(start, zone) == datetime(2026, 11, 2, tzinfo=zone)
    assert datetime.fromtimestamp(end, zone) == datetime(2026, 12, 1, tzinfo=zone)
    today = window(board, {"timeFrom": "now/d", "gridPos": {"w": 4}}, now)
    assert builtins(today)["__range"] == f"{15 * 3600 + 40 * 60}s"
    hourly = window(board, {"interval": "1h", "gridPos": {"w": 12}}, now)
    assert builtins(hourly)["__interval"] == "1h"
    # 24 h over 1800 px: a 1-minute interval; rate interval = interval + one 15 s scrape.
    assert builtins(window(board, {"gridPos": {"w": 24}}, now))["__rate_interval"] == "75s"


def test_heatmap_buckets_and_table_merge_as_grafana_does() -> None:
    """Cumulative buckets become per-bucket counts; a label only one query has joins its row."""
    cumulative = [Series(le, {"le": le}, [0.0, 60.0], values)
                  for le, values in (("+Inf", [5.0, 9.0]), ("10", [2.0, 3.0]), ("100", [4.0, 9.0]))]
    assert [(s.labels["le"], s.values) for s in deaccumulate(cumulative)] == [
        ("10", [2.0, 3.0]), ("100", [2.0, 6.0]), ("+Inf", [1.0, 0.0])]
    target = {"job": "claude-code", "instance": "ws-1:9477"}
    panel: dict[str, Any] = {"type": "table", "transformations": [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": {"Value #A": True, "job": True},
                                        "renameByName": {"Value #B": "Up"}}}]}
    results = [Result("A", "", True, [Series("", {**target, "version": "0.1.0"}, [0.0], [1.0])]),
               Result("B", "", True, [Series("", target, [0.0], [1.0]),
                                      Series("", {**target, "instance": "dead"}, [0.0], [0.0])])]
    shown = table(PanelData(panel, "Exporters", None, results))
    assert shown.columns == ["instance", "version", "Up"]
    assert shown.rows == [{"instance": "ws-1:9477", "version": "0.1.0", "Up": 1.0},
                          {"instance": "dead", "Up": 0.0}]
    assert regex_escape("127.0.0.1:9477") == "127\\\\.0\\\\.0\\\\.1:9477"


# -------------------------------------------------------------- live checks


@dataclass(frozen=True)
class Drawn:
    """The stack and the four dashboards as ``grafana.render`` queried and drew them."""

    stack: HistoryStack
    boards: dict[str, list[PanelData]]
    variables: dict[str, Variables]
    images: Path
    at: int  # the dashboards' "now" (unix seconds): their instant queries are at this time


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drawn]:
    """The dashboard stack, drawn right after its live requests (the "now" figures have data).

    With ``UPDATE_GOLDEN=1`` the PNGs go to docs/img (the screenshots of
    docs/grafana.md), else to a temporary directory.
    """
    require_sdk()
    base = tmp_path_factory.mktemp("dashboards")
    images = IMAGES if os.environ.get("UPDATE_GOLDEN") else base / "img"
    with dashboard_stack.running(base / "stack") as stack:
        boards = {name: dashboards()[name] for name in OWN}
        # The next whole second (after every sample scraped so far): a window then starts
        # exactly on its boundary (midnight, a full hour), where the backfill has a sample.
        # From a fractional "now" it starts just after it, and increase() misses or
        # extrapolates the change of the first minute after the boundary.
        now = datetime.fromtimestamp(math.ceil(time.time()), UTC)
        done = render.render_boards({n.removesuffix(".json"): b for n, b in boards.items()},
                                    Prometheus(stack.prom.url), now, out=images)
        yield Drawn(stack, {d.name + ".json": d.panels for d in done},
                    {d.name + ".json": d.variables for d in done}, images, int(now.timestamp()))


def by_title(drawn: Drawn, board: str) -> dict[str, PanelData]:
    """The drawn panels of one dashboard by title (rows and text panels left out)."""
    return {p.panel["title"]: p for p in drawn.boards[board] if p.kind not in ("row", "text")}


def value(data: PanelData) -> float:
    """The single value a stat panel shows."""
    (series,) = [s for r in data.results for s in r.series]
    return series.values[-1]


#: Figures that are legitimately zero in the generated history: it has no
#: request upgraded after it entered the histograms.
ZERO_ALLOWED = {("claude-code-exporter.json", "Late updates, selected range")}
#: The Codex row of the usage dashboard: the stack's generated history has no Codex
#: session yet (exporter.synth writes Claude Code's), so its panels draw nothing here;
#: tests/test_codex_metrics.py draws them over a Codex history.
NO_CODEX = "claude-code-usage.json"


def codex_panel(board: str, data: PanelData) -> bool:
    """Whether a drawn panel is one of the Codex row's (queries gated by the agent variable)."""
    return board == NO_CODEX and any("vector($agent)" in t["expr"]
                                     for t in data.panel.get("targets", []))


def test_every_panel_draws_data_no_zero_panel_no_fractional_count(drawn: Drawn) -> None:
    """After a backfill every panel of the four dashboards has data, not all zero, whole counts."""
    found = {}
    for board, data in drawn.boards.items():
        for panel in data:
            issues = problems(panel)
            if (board, panel.panel.get("title")) in ZERO_ALLOWED:
                issues = [i for i in issues if i != "only zeros"]
            if codex_panel(board, panel):
                issues = [i for i in issues if i != "no data"]
            if issues:
                found[(board, panel.title)] = issues
    assert not found, found
    count = sum(len(p.results) for data in drawn.boards.values() for p in data)
    assert count >= 70
    for name in OWN:
        png = drawn.images / name.replace(".json", ".png")
        assert png.stat().st_size > 50_000, png


def test_the_checks_find_an_empty_panel_and_a_fractional_count(drawn: Drawn) -> None:
    """``problems()`` flags a panel without data, one of only zeros and a fractional count."""
    requests = by_title(drawn, "claude-code-usage.json")["Requests, selected range"]
    assert problems(requests) == []
    target = requests.panel["targets"][0]
    win = requests.window
    assert win is not None
    prom = Prometheus(drawn.stack.prom.url)
    unrounded = target["expr"].replace("round(", "(", 1)
    variables = drawn.variables["claude-code-usage.json"]
    for expr, issue in ((unrounded + " + 0.5", "fractional counts"),
                        (unrounded + " * 0", "only zeros"),
                        (unrounded + " > 1e15", "no data")):
        result = run_query(prom, target, variables.substitute(expr, builtins(win)), win)
        broken = PanelData(requests.panel, requests.title, win, [result])
        assert any(p.startswith(issue) for p in problems(broken)), (expr, problems(broken))


def test_variables_list_only_the_exporters(drawn: Drawn) -> None:
    """The job variable lists the exporter job only (no blackbox); instance and user its targets."""
    for name in OWN:
        listed = drawn.variables[name].listed
        assert listed["job"] == [JOB], name
        assert listed["instance"] == sorted([INSTANCE, drawn.stack.dead_address]), name
        assert listed["user"] == sorted([USER, DEAD_USER]), name
    serving = drawn.variables["claude-code-serving.json"].listed
    assert serving["arch"] == ["gqa", "mla"]
    cache = drawn.variables["claude-code-cache.json"].listed
    assert len(cache["model"]) >= 3 and len(cache["project"]) >= 4


def test_up_of_other_jobs_is_never_counted(drawn: Drawn) -> None:
    """The failing blackbox probe is in Prometheus but in no panel; the down exporter is."""
    assert drawn.stack.prom.query('up{job="blackbox"} == 0')
    health = by_title(drawn, "claude-code-exporter.json")
    assert value(health["Exporters up"]) == 1
    assert value(health["Exporters down"]) == 1
    for data in drawn.boards.values():
        for panel in data:
            for result in panel.results:
                if re.search(r"\bup\{", result.expr):
                    jobs = {s.labels.get("job", JOB) for s in result.series}
                    assert jobs <= {JOB}, (panel.title, jobs)


def sum_of(drawn: Drawn, expr: str) -> float:
    """The value of a one-series PromQL sum (0 when it has no series)."""
    result = drawn.stack.prom.query(f"({expr}) or vector(0)")
    return sample_value(result[0])


def spent_by_project(drawn: Drawn, midnight: int) -> dict[str, tuple[float, float]]:
    """Per project: increase() since midnight and the counters' growth, at the drawing time."""
    at = drawn.at
    panel = drawn.stack.prom.query(f"sum by (project) (increase({COST}[{at - midnight}s] @ {at}))")
    grown = drawn.stack.prom.query(
        f"sum by (project) ({COST} @ {at}) - "
        f"sum by (project) (last_over_time({COST}[30d] @ {midnight}))")
    drawn_by = {s["metric"].get("project", ""): sample_value(s) for s in panel}
    grown_by = {s["metric"].get("project", ""): sample_value(s) for s in grown}
    pairs = {p: (drawn_by.get(p, 0.0), grown_by.get(p, 0.0)) for p in drawn_by | grown_by}
    return {p: pair for p, pair in pairs.items() if abs(pair[0] - pair[1]) > 1e-6}


def test_spend_figures_agree_with_the_exporter_and_each_other(drawn: Drawn) -> None:
    """30 days = the exporter's cost counter (all history is younger); days and hours add up."""
    usage = by_title(drawn, "claude-code-usage.json")
    counter = sample_value(drawn.stack.prom.query("sum(claude_code_cost_usd_total)")[0])
    month = value(usage["Spent, last 30 days"])
    assert month == pytest.approx(counter, rel=0.01)
    days = usage["Cost per day, last 30 days (dashed: daily budget)"]
    per_model = days.results[0].series
    assert sum(sum(s.values) for s in per_model) == pytest.approx(month, rel=0.01)
    assert len({t for s in per_model for t in s.times}) >= 5  # five calendar days with spend
    (budget,) = days.results[1].series
    assert set(budget.values) == {dashboard_stack.DAY_BUDGET_USD}
    # Today: the counters' growth from midnight UTC (the stack's time zone) to the moment
    # the panels were drawn. increase() sees neither the first value of a series that
    # appeared live (a backfilled series is born with a 0 sample, a live one is not) nor
    # exactly the growth of one seen for a few scrapes only: it extrapolates that to the
    # window's edges, by up to the growth itself (the live requests are seconds old).
    at, until = drawn.at, drawn.stack.until
    midnight = at // 86400 * 86400
    # The value at midnight is each series' last sample before it: backfilled blocks
    # sample a series near its changes only (docs/backfill.md), so a plain instant
    # lookup there may find nothing within Prometheus's 5-minute lookback.
    at_midnight = f"last_over_time({COST}[30d] @ {midnight})"
    first_live = f"min_over_time({COST}[{at - until}s] @ {at}) unless {COST} @ {until}"
    grown = sum_of(drawn, f"sum({COST} @ {at}) - sum({at_midnight})") - sum_of(
        drawn, f"sum({first_live})")
    live_growth = sum_of(drawn, f"sum({COST} @ {at} - {first_live})")
    spent = value(usage["Spent today"])
    assert grown * 0.99 <= spent <= grown * 1.01 + live_growth, spent_by_project(drawn, midnight)
    assert value(usage["Daily budget"]) == dashboard_stack.DAY_BUDGET_USD
    assert value(usage["Monthly budget"]) == dashboard_stack.MONTH_BUDGET_USD
    share = value(usage["30 days / monthly budget"])
    assert share == pytest.approx(month / dashboard_stack.MONTH_BUDGET_USD, rel=1e-6)


def test_the_monthly_rule_and_the_backfilled_rules_have_the_history(drawn: Drawn) -> None:
    """increase30d (alert input) equals the panel; the rules backfill gave every rule a past."""
    stack = drawn.stack
    month = value(by_title(drawn, "claude-code-usage.json")["Spent, last 30 days"])
    (recorded,) = stack.prom.wait_for(
        f'claude_code:cost_usd:increase30d{{instance="{INSTANCE}"}}')
    assert sample_value(recorded) == pytest.approx(month, rel=0.01)
    backfilled = str(stack.until - 60)  # before Prometheus evaluated any rule itself
    for name in ("claude_code:cost_usd_per_hour:rate1h", "claude_code:cache_read_share:rate1h",
                 "claude_code:cost_usd:increase1d"):
        span = f"{(stack.until - stack.rules_start) // 3600 - 1}h"
        found = stack.prom.api("query", {"query": f"count_over_time({name}[{span}])",
                                         "time": backfilled})["result"]
        assert found and sample_value(found[0]) > 100, f"{name} has no backfilled history"


def test_cache_expiry_table_agrees_with_the_recording_rule(drawn: Drawn) -> None:
    """The cache-expiry table (counters over the range) agrees with the one-day recording rule."""
    table = by_title(drawn, "claude-code-cache.json")[
        "Idle gap and cache rewrite (the cache-expiry table)"]
    written = {s.labels["gap"]: s.values[-1] for s in table.results[2].series}
    rule = {s["metric"]["gap"]: sample_value(s) for s in drawn.stack.prom.query(
        f'claude_code:cache_write_share_by_gap:rate1d{{instance="{INSTANCE}"}}')}
    assert set(written) == set(rule) >= {"lt_5m", "5m_to_1h", "gt_1h"}
    for gap, share in rule.items():
        assert written[gap] == pytest.approx(share, rel=0.05), gap
    shown = [row[0] for row in table_cells(table)[1]]
    assert shown == ["≤ 5 min", "5 min – 1 h", "> 1 h", "first request"]


def test_metric_names_exist_in_the_live_exporter(drawn: Drawn) -> None:
    """Every metric the dashboards name is in the real daemon's /metrics or the rules."""
    final = drawn.stack.daemon.scrape()
    known = {s.name for fam in final.values() for s in fam.samples}
    known |= rule_names() | PROMETHEUS_SERIES
    # Codex's families: in the golden only, until the stack's history has Codex sessions.
    known |= {n for n in exposition_names(CODEX_GOLDEN.read_text()) if "_codex_" in n}
    known |= {n for n in PLAN_SERIES if "_codex_" in n}  # Codex's plan families: no golden
    missing = {name: unknown_metrics(board, known) for name, board in dashboards().items()}
    assert not any(missing.values()), missing


def test_plan_row_draws_the_status_line_history_and_the_live_figures(drawn: Drawn) -> None:
    """The plan row: backfilled utilisation, the live figure, the pace gauges, the window's $.

    The samples were generated from the history's requests with a known size per 1 %;
    the panel's estimate (from serve's ledger) is close to it, and equals /metrics.
    """
    usage = by_title(drawn, "claude-code-usage.json")
    stack = drawn.stack
    used = usage["Plan window used and projected at reset (dashed: 80 % and the limit)"]
    (five,) = [s for s in used.results[0].series if s.labels.get("window") == "five_hour"]
    assert len(five.times) > 100  # the backfilled history, not only the live scrapes
    assert max(five.values) >= 0.5 and 0.0 in five.values  # windows filled, and reset
    # The live figure (recorded seconds ago, maybe after the graph's last step): at least
    # that much by the reset, at the pace of the live refreshes.
    projected = usage["Projected at reset"]
    (at_reset,) = [s.values[-1] for r in projected.results for s in r.series
                   if s.labels.get("window") == "five_hour"]
    assert at_reset > stack.plan["five_hour"] / 100
    # The pace gauges, not a PromQL slope: the live window (30 % an hour in, rising) runs
    # out before its reset in 4 hours, and the projection says so.
    assert at_reset > 1
    ahead = usage["Time to limit at this pace"]
    (left,) = [s.values[-1] for r in ahead.results for s in r.series
               if s.labels.get("window") == "five_hour"]
    assert 0 < left < 4 * 3600
    assert "deriv(" not in (DASHBOARD_DIR / "claude-code-usage.json").read_text()
    dollars = usage["Window in list-price dollars (and sample pairs)"]
    shown = {s.name: s.values[-1] for r in dollars.results for s in r.series}
    exposed = {s["metric"]["window"]: sample_value(s) for s in stack.prom.query(
        f'claude_code_plan_window_usd_per_percent{{instance="{INSTANCE}"}}')}
    assert shown["five_hour $"] == pytest.approx(100 * exposed["five_hour"], rel=1e-9)
    assert shown["five_hour $"] == pytest.approx(100 * stack.plan_usd[0], rel=0.1)
    assert shown["five_hour pairs"] >= 20
