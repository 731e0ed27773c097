"""Attribution: skill, plugin, MCP server, agent and effort per request, and their views.

The fields, their merge rule and the views' shapes are in docs/figures.md
("Attribution"); the transcript format in the shared design notes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3 as stdlib_sqlite3
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from exporter.cli.commands import main
from exporter.ingest.classify import MAX_LABEL_CHARS
from exporter.ingest.parse import parse_lines
from exporter.ledger.opening import SCHEMA_VERSION
from exporter.projections.attributed import RELOAD_SECONDS, Attributed, Names
from exporter.projections.pricing import RateTable
from exporter.records import Request
from exporter.synth import GenOptions, generate
from tests.support.clock import Clock
from tests.support.figures import assert_matches
from tests.support.ledgers import appearances, ledger_of
from tests.support.process import Serve
from tests.support.projection import T0, batch, loaded, projection, req
from tests.support.records import ADVISOR_USAGE, assistant, jsonl
from tests.support.scan import counting_ledger
from tests.support.wait import poll

NOW = 2e9
VIEWS = {"skill": "skill", "plugin": "plugin", "mcp": "mcp_server", "agent": "agent"}
NAMED: dict[str, Any] = {"attributionSkill": "conventional-commit", "attributionPlugin": "entire",
         "attributionMcpServer": "github", "attributionAgent": "Explore", "effort": "high"}


def both(data: bytes) -> dict[str, Request]:
    """The requests of ``data``; the fast and tolerant paths agree."""
    fast, slow = parse_lines(data, now=NOW), parse_lines(data, now=NOW, fast=False)
    assert fast.requests == slow.requests
    assert fast.counts == slow.counts
    return fast.requests


def labels(req: Request) -> tuple[str, ...]:
    """A request's attribution fields."""
    return (req.skill, req.plugin, req.mcp_server, req.agent, req.effort)


def run(tree: Path, state: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """``report ARGS --json`` in-process over ``tree``."""
    assert main(["report", *args, "--json", "--data-dir", str(tree),
                 "--state-dir", str(state)]) == 0
    return json.loads(capsys.readouterr().out)


def write(tree: Path, *records: dict[str, Any]) -> None:
    """One transcript file of ``records`` under ``tree``."""
    path = tree / "projects" / "-home-u-proj" / "s1.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(jsonl(*records))


def test_fields_are_read_from_the_line() -> None:
    """Every attribution field of an assistant line lands on its request."""
    reqs = both(jsonl(assistant(**NAMED)))
    assert labels(reqs["msg_1\x1freq_1"]) == ("conventional-commit", "entire", "github",
                                              "Explore", "high")


def test_a_blank_copy_never_hides_a_name_in_any_order() -> None:
    """Streaming splits: the MCP server on the second line only; any line order, one answer."""
    first = assistant(ts="2026-10-01T12:00:00.000Z", effort="high")
    second = assistant(ts="2026-10-01T12:00:01.000Z", effort="low", attributionMcpServer="github")
    for lines in ((first, second), (second, first)):
        req = both(jsonl(*lines))["msg_1\x1freq_1"]
        # The earliest copy's effort; the only copy's server.
        assert (req.mcp_server, req.effort) == ("github", "high")
    # Across batches (the fold state seeded from an earlier batch) too.
    parsed = parse_lines(jsonl(first), now=NOW)
    parse_lines(jsonl(second), now=NOW, into=parsed)
    assert parsed.requests["msg_1\x1freq_1"].mcp_server == "github"


def test_hostile_values_are_checked() -> None:
    """A number or an endless string: blank or cut, the line kept (never a rejection)."""
    long = "x" * (MAX_LABEL_CHARS * 4)
    req = both(jsonl(assistant(attributionSkill=12, attributionPlugin=long,
                               effort=["high"])))["msg_1\x1freq_1"]
    assert (req.skill, req.plugin, req.effort) == ("", "x" * MAX_LABEL_CHARS, "")
    cut = both(jsonl(assistant(attributionSkill="\u00e9" * 300)))["msg_1\x1freq_1"].skill
    assert cut == "\u00e9" * MAX_LABEL_CHARS


def test_progress_copy_and_advisor_part_keep_their_attribution() -> None:
    """A progress copy's own fields count; an advisor consultation takes its line's."""
    inner = assistant("m9", "r9", sidechain=True, agent="a1", attributionAgent="Explore")
    progress = {"type": "progress", "sessionId": "s1", "cwd": "/p", "attributionSkill": "tdd",
                "timestamp": inner["timestamp"],
                "data": {"type": "agent_progress", "agentId": "a1", "message": inner}}
    reqs = both(jsonl(progress, assistant(model="claude-sonnet-5", usage=ADVISOR_USAGE,
                                          attributionSkill="tdd")))
    assert (reqs["m9\x1fr9"].agent, reqs["m9\x1fr9"].skill) == ("Explore", "")
    assert {r.skill for r in reqs.values() if r.key.startswith("msg_1")} == {"tdd"}
    assert len(reqs) == 3  # the line, its consultation, the progress copy


def test_views_add_up_to_the_summary_and_name_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Each view: one row per value, "none" for the rest; rows sum to the summary."""
    write(tmp_path / "t", assistant(**NAMED), assistant("m2", "r2", ts="2026-10-01T12:01:00Z"))
    summary = run(tmp_path / "t", tmp_path / "s", capsys)["totals"]
    for view, key in VIEWS.items():
        got = run(tmp_path / "t", tmp_path / "s", capsys, view)
        assert sorted(r[key] for r in got["rows"]) == sorted([NAMED_BY[key], "none"])
        for figure in ("requests", "input_tokens", "output_tokens", "cache_read_tokens"):
            assert sum(r[figure] for r in got["rows"]) == summary[figure] == got["totals"][figure]
        assert abs(got["totals"]["cost_usd"] - summary["cost_usd"]) < 1e-9


NAMED_BY = {"skill": "conventional-commit", "plugin": "entire", "mcp_server": "github",
            "agent": "Explore"}


def test_breakdown_by_effort_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--breakdown-by effort splits rows by effort; --csv has a line per row and effort."""
    write(tmp_path / "t", assistant(**NAMED),
          assistant("m2", "r2", ts="2026-10-01T12:01:00Z", attributionSkill="conventional-commit"))
    got = run(tmp_path / "t", tmp_path / "s", capsys, "skill", "--breakdown-by", "effort")
    assert got["breakdown"] == "effort"
    assert [p["effort"] for p in got["rows"][0]["breakdown"]] == ["high", "none"]
    assert main(["report", "skill", "--csv", "--breakdown-by", "effort", "--data-dir",
                 str(tmp_path / "t"), "--state-dir", str(tmp_path / "s")]) == 0
    csv_lines = capsys.readouterr().out.splitlines()
    assert csv_lines[0].startswith("skill,sessions,first_request,last_request,effort,")
    assert len(csv_lines) == 3
    assert main(["report", "daily", "--breakdown-by", "effort"]) == 2  # not an attribution view


def test_v2_ledger_gains_the_columns_and_old_rows_read_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A ledger of the previous schema is migrated in place: its rows are "none"."""
    write(tmp_path / "t", assistant(**NAMED))
    run(tmp_path / "t", tmp_path / "s", capsys)
    con = stdlib_sqlite3.connect(tmp_path / "s" / "ledger.sqlite3")
    for column in VIEWS.values():  # back to v2: no attribution columns
        con.execute(f"ALTER TABLE requests DROP COLUMN {column}")
    con.execute("ALTER TABLE requests DROP COLUMN effort")
    con.execute("PRAGMA user_version = 2")
    con.commit()
    con.close()
    got = run(tmp_path / "t", tmp_path / "s", capsys, "skill")
    assert [(r["skill"], r["requests"]) for r in got["rows"]] == [("none", 1)]
    con = stdlib_sqlite3.connect(tmp_path / "s" / "ledger.sqlite3")
    assert con.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    con.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_tree_with_attribution_equals_the_truth(
    seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A generated tree with attribution (and iterations): each view equals the truth."""
    truth = generate(tmp_path / "tree", GenOptions(seed=seed, sessions=6, iterations=True,
                                                   attribution=True))
    want = truth.pop("attribution")
    summary = run(tmp_path / "tree", tmp_path / "state", capsys)
    assert_matches(summary, truth)
    assert len(want["skill"]) > 2 and "none" in want["mcp_server"]
    for view, key in {**VIEWS, "skill": "skill"}.items():
        got = run(tmp_path / "tree", tmp_path / "state", capsys, view)
        rows = {r[key]: r for r in got["rows"]}
        assert set(rows) == set(want[key])
        for name, t in want[key].items():
            assert_matches(rows[name], t, f"/{view}/{name}")
        assert got["totals"]["requests"] == summary["totals"]["requests"]
    efforts = run(tmp_path / "tree", tmp_path / "state", capsys, "agent", "--breakdown-by",
                  "effort")
    parts: dict[str, int] = {}
    for row in efforts["rows"]:
        for p in row["breakdown"]:
            parts[p["effort"]] = parts.get(p["effort"], 0) + p["requests"]
    assert parts == {k: t["requests"] for k, t in want["effort"].items()}


# ---- /metrics: the attribution families -------------------------------------------------
def exposition(registry: Any) -> str:
    """The registry's Prometheus text."""
    return generate_latest(registry).decode()


def attributed(text: str, family: str, kind: str, name: str) -> float:
    """One attribution sample's value (its ``name`` label clashes with sample()'s argument)."""
    line = f'{family}{{kind="{kind}",name="{name}"}} '
    found = [float(x[len(line):]) for x in text.splitlines() if x.startswith(line)]
    assert len(found) == 1, f"{line} exposed {len(found)} times"
    return found[0]


def test_metrics_count_batches_and_start_from_the_ledger(tmp_path: Path) -> None:
    """Attributed requests and cost grow per batch; a restart begins at the same values."""
    clock = Clock(T0 + 100)
    proj, registry, ledger = loaded(tmp_path, [req("a", T0)._replace(skill="tdd")], clock)
    new = [req("b", T0 + 10, output=300)._replace(skill="tdd", effort="high"),
           req("c", T0 + 20)]  # unattributed: in no series
    parsed = batch(ledger, *new)
    proj.apply(ledger.apply(parsed, [], 0, appearances(parsed.requests.values())))
    text = exposition(registry)
    skill = attributed(text, "claude_code_attributed_cost_usd_total", "skill", "tdd")
    # opus-4-6: a (5 in, 100 out, 10,000 read, 500 w5) + b (the same with 300 out), µUSD.
    assert skill == pytest.approx((25 + 2_500 + 5_000 + 3_125 + 25 + 7_500 + 5_000 + 3_125) / 1e6)
    assert attributed(text, "claude_code_attributed_requests_total", "skill", "tdd") == 2
    assert attributed(text, "claude_code_attributed_requests_total", "effort", "high") == 1
    assert "none" not in text.split("claude_code_attributed_requests_total", 1)[1].split("#")[0]
    again, registry2 = projection(clock)
    again.load(ledger)
    restarted = exposition(registry2)
    for kind, name in (("skill", "tdd"), ("effort", "high")):
        for family in ("claude_code_attributed_cost_usd_total",
                       "claude_code_attributed_requests_total"):
            assert attributed(restarted, family, kind, name) == pytest.approx(
                attributed(text, family, kind, name))
    ledger.close()


def test_names_follow_the_project_policy_and_the_cap() -> None:
    """hash: a digest; none: no private kind (effort stays); past the cap: other."""
    assert Names("hash").label("skill", "secret-skill") == hashlib.sha256(
        b"secret-skill").hexdigest()[:12]
    assert Names("none").label("plugin", "p") is None
    assert Names("none").label("effort", "high") == "high"
    assert Names("full").label("mcp_server", "bad\x1bname") == "bad?name"
    capped = Names("basename", max_names=2)
    assert [capped.label("agent", n) for n in ("a", "b", "c", "a")] == ["a", "b", "other", "a"]


def test_a_first_pass_without_rows_is_read_again(tmp_path: Path) -> None:
    """Batches without row lists (a raw pass): sums read again after it, or every 30 s in it."""
    clock = Clock(T0 + 100)
    ledger = ledger_of(tmp_path / "l.db", [req("a", T0)._replace(plugin="p")], clock=clock)
    attributed = Attributed(RateTable.load(), Names(), clock=clock)
    first = attributed.load(ledger.read, "requests")
    assert first[("attributed_requests", (("kind", "plugin"), ("name", "p")))] == 1
    parsed = batch(ledger, req("b", T0 + 10)._replace(plugin="p"))
    ledger.apply(parsed, [], 0, appearances(parsed.requests.values()))
    key = ("attributed_requests", (("kind", "plugin"), ("name", "p")))
    clock.now += 1
    assert attributed.apply([], [], raw=True) == {}  # the pass goes on: read at a later turn
    assert attributed.apply([], [], raw=False)[key] == 1  # its next turn (settling) reads
    parsed = batch(ledger, req("c", T0 + 20)._replace(plugin="p"))
    ledger.apply(parsed, [], 0, appearances(parsed.requests.values()))
    clock.now += RELOAD_SECONDS
    assert attributed.apply([], [], raw=True)[key] == 1  # a long pass: every 30 s
    ledger.close()


def test_first_pass_and_incremental_merge_attribution_alike(tmp_path: Path) -> None:
    """Copies of one request in three batches: the raw pass's SQL merge equals records.merge."""
    base = req("k", T0)
    batches = (
        [base._replace(ts=T0 + 1, effort="low")],
        [base._replace(ts=T0, skill="tdd", mcp_server="github")],  # earlier: its names win
        [base._replace(ts=T0 + 2, skill="other", mcp_server="playwright", output=500)],
    )
    got = []
    for name, raw in (("raw", True), ("inc", False)):
        ledger = counting_ledger(tmp_path / f"{name}.db")
        with ledger.bulk(3, raw=raw):
            assert ledger.raw == raw
            for reqs in batches:
                parsed = batch(ledger, *reqs)
                ledger.apply(parsed, [], 0, appearances(reqs))
        got.append(ledger.read("SELECT skill, plugin, mcp_server, agent, effort, output, ts "
                               "FROM requests"))
        ledger.close()
    assert got[0] == got[1] == [("tdd", "", "github", "", "low", 500, T0)]


def test_serve_exposes_the_truth_after_its_first_pass(tmp_path: Path) -> None:
    """A real serve over a generated tree: attributed requests and cost equal the truth."""
    tree = tmp_path / "tree"
    want = generate(tree, GenOptions(seed=5, sessions=4, requests_per_session=60,
                                     attribution=True))["attribution"]

    def exposed(daemon: Serve) -> dict[tuple[str, str], tuple[float, float]] | None:
        fams = daemon.scrape()
        if "claude_code_attributed_cost_usd" not in fams:
            return None
        got: dict[tuple[str, str], list[float]] = {}
        for family, i in (("claude_code_attributed_requests", 0),
                          ("claude_code_attributed_cost_usd", 1)):
            for s in fams[family].samples:
                if s.name.endswith("_total"):
                    got.setdefault((s.labels["kind"], s.labels["name"]), [0.0, 0.0])[i] = s.value
        wanted = {(k, n): (t["requests"], t["cost_usd"]) for k, names in want.items()
                  for n, t in names.items() if n != "none"}
        if set(got) != set(wanted) or any(got[k][0] != v[0] for k, v in wanted.items()):
            return None
        return {k: (v[0], v[1]) for k, v in got.items()}

    daemon = Serve(tree, tmp_path / "state")
    try:
        first = poll(lambda: exposed(daemon), 60, "attributed families equal the truth")
    finally:
        daemon.stop()
    for (kind, name), (_n, cost) in first.items():
        assert cost == pytest.approx(want[kind][name]["cost_usd"], abs=1e-6), (kind, name)
    again = Serve(tree, tmp_path / "state")  # a restart begins at the same values
    try:
        assert poll(lambda: exposed(again), 60, "restarted") == first
    finally:
        again.stop()
