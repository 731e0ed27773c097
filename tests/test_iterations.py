"""``usage.iterations``: advisor consultations billed on top, fallbacks, compaction, unknown types.

The worked examples of the issue, computed by hand at list price (USD per
million tokens, genai-prices as installed): claude-sonnet-5 input 2, output
10; claude-opus-5 input 5, cache write 5m 6.25, cache read 0.50, output 25;
claude-opus-4-8 input 5, 1h write 10, output 25; claude-fable-5 input 10,
cache read 1, 1h write 20, output 50.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from exporter.cli.commands import main
from exporter.ingest.parse import parse_lines
from exporter.ledger.store import Ledger
from exporter.records import Request, Source
from exporter.synth import GenOptions, generate
from tests.support import backfill
from tests.support.clock import Clock
from tests.support.exposition import families, total
from tests.support.figures import assert_matches
from tests.support.ledgers import appearances
from tests.support.projection import T0, loaded, projection
from tests.support.records import ADVISOR_ENTRY, ADVISOR_USAGE, assistant, jsonl
from tests.support.scan import ingest

NOW = 2e9  # the parser's clock: every test timestamp is in its past
TS = "2026-11-02T10:00:00.000Z"

# sonnet-5 executor: 4 × 2 + 683 × 10 = 6,838 µUSD.
EXECUTOR_USD = 0.006838
# opus-5 advisor: 91,627 × 5 + 18,716 × 25 + 100 × 0.5 + 50 × 6.25 = 926,397.5 µUSD.
ADVISOR_USD = 0.926398

FABLE_ATTEMPT = {"type": "message", "model": "claude-fable-5", "input_tokens": 2,
                 "output_tokens": 2, "cache_read_input_tokens": 32_238,
                 "cache_creation_input_tokens": 21_874,
                 "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                    "ephemeral_1h_input_tokens": 21_874}}
SERVED = {"input_tokens": 3, "output_tokens": 150, "cache_read_input_tokens": 0,
          "cache_creation_input_tokens": 54_112,
          "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 54_112}}
FALLBACK_USAGE = {**SERVED, "iterations": [
    FABLE_ATTEMPT, {"type": "fallback_message", "model": "claude-opus-4-8", **SERVED}]}
# opus-4-8 only (the refused fable-5 attempt is not billed): 3 × 5 + 150 × 25 + 54,112 × 10
# = 544,885 µUSD. Billing the attempt too would add 2 × 10 + 2 × 50 + 32,238 × 1
# + 21,874 × 20 = 469,838 µUSD.
FALLBACK_USD = 0.544885


def parsed_both(data: bytes) -> tuple[dict[str, Request], dict[str, int]]:
    """The requests and iteration counts of ``data``; the fast and tolerant paths agree."""
    fast, slow = parse_lines(data, now=NOW), parse_lines(data, now=NOW, fast=False)
    assert fast.requests == slow.requests
    assert fast.counts == slow.counts
    return fast.requests, dict(fast.counts.iterations)


def report(tree: Path, state: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    """``report --json`` in-process over ``tree``."""
    assert main(["report", "--json", "--data-dir", str(tree), "--state-dir", str(state),
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


def write(tree: Path, name: str, *records: dict[str, Any]) -> None:
    """A transcript file of ``records`` under ``tree``'s projects."""
    path = tree / "projects" / "-home-u-proj" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(jsonl(*records))


def test_advisor_consultation_is_a_request_of_its_own_model() -> None:
    """The advisor entry becomes an ``advisor`` request on opus-5; the line's own stays sonnet-5."""
    reqs, kinds = parsed_both(jsonl(assistant(model="claude-sonnet-5", ts=TS,
                                              usage=ADVISOR_USAGE)))
    main = reqs["msg_1\x1freq_1"]
    part = reqs["msg_1\x1freq_1\x1eadvisor_message\x1fclaude-opus-5\x1f0"]
    assert (main.model, main.source, main.input, main.output) == ("claude-sonnet-5", Source.MAIN,
                                                                  4, 683)
    assert (part.model, part.source, part.session, part.project, part.ts) == (
        "claude-opus-5", Source.ADVISOR, main.session, main.project, main.ts)
    assert (part.input, part.output, part.cache_read, part.cache_write_5m,
            part.cache_write_1h) == (91_627, 18_716, 100, 50, 0)
    assert kinds == {"advisor": 1}  # the message entries add up to the top level


def test_advisor_request_costs_both_parts(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """report: the executor and the advisor each at their own list price, by model and source."""
    write(tmp_path / "tree", "s1.jsonl", assistant(model="claude-sonnet-5", ts=TS,
                                                   usage=ADVISOR_USAGE))
    got = report(tmp_path / "tree", tmp_path / "state", capsys)
    assert got["by_model"]["claude-sonnet-5"]["cost_usd"] == EXECUTOR_USD
    assert got["by_model"]["claude-opus-5"]["cost_usd"] == ADVISOR_USD
    assert got["by_source"]["advisor"]["cost_usd"] == ADVISOR_USD
    assert got["by_source"]["main"]["cost_usd"] == EXECUTOR_USD
    assert got["totals"]["cost_usd"] == round(EXECUTOR_USD + ADVISOR_USD, 6)
    assert (got["totals"]["requests"], got["totals"]["input_tokens"],
            got["totals"]["output_tokens"]) == (2, 91_631, 19_399)
    assert got["iterations"] == {"advisor": 1}
    # A consultation is not a request the conversation sent: no gap, no upload, and not in
    # the distributions (the executor's prompt is 4 tokens, the advisor's 91,777).
    assert got["gap_seconds"]["count"] == 0
    assert got["upload_bytes"]["total"] == 4 * 4
    assert got["context_tokens"] == {"p50": 4, "p90": 4, "max": 4}
    assert got["output_tokens"] == {"p50": 683, "p90": 683, "max": 683}


def test_streaming_splits_and_a_resumed_copy_count_the_advisor_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Three streaming lines (the consultation growing) and a resumed session's replay: once."""
    first = {"input_tokens": 4, "output_tokens": 12, "iterations": [
        {"type": "message", "input_tokens": 2, "output_tokens": 12}]}
    middle = {"input_tokens": 4, "output_tokens": 85, "iterations": [
        {"type": "message", "input_tokens": 2, "output_tokens": 85},
        {**ADVISOR_ENTRY, "output_tokens": 9_000}]}
    lines = [assistant(model="claude-sonnet-5", ts=TS, usage=u)
             for u in (first, middle, ADVISOR_USAGE)]
    write(tmp_path / "tree", "s1.jsonl", *lines)
    write(tmp_path / "tree", "s2.jsonl", *(assistant(model="claude-sonnet-5", ts=TS,
                                                     session="s2", usage=ADVISOR_USAGE)
                                           for _ in range(2)))
    got = report(tmp_path / "tree", tmp_path / "state", capsys)
    assert got["totals"]["requests"] == 2
    assert got["by_model"]["claude-opus-5"]["output_tokens"] == 18_716
    assert got["totals"]["cost_usd"] == round(EXECUTOR_USD + ADVISOR_USD, 6)
    assert got["lines"]["usage"] == 1 and got["lines"]["duplicate"] == 4


def test_fallback_bills_the_served_attempt_only(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The refused fable-5 attempt is counted as superseded, never priced; opus-4-8 is billed."""
    record = assistant(model="claude-opus-4-8", ts=TS, usage=FALLBACK_USAGE)
    reqs, kinds = parsed_both(jsonl(record))
    assert list(reqs) == ["msg_1\x1freq_1"]
    assert kinds == {"fallback": 1, "superseded": 1}
    write(tmp_path / "tree", "s1.jsonl", record)
    got = report(tmp_path / "tree", tmp_path / "state", capsys)
    assert list(got["by_model"]) == ["claude-opus-4-8"]
    assert got["totals"]["cost_usd"] == FALLBACK_USD
    assert got["totals"]["cache_write_1h_tokens"] == 54_112


def test_compaction_iterations_are_parts_of_the_top_level() -> None:
    """Compaction and message entries that add up to the top level add nothing; else a mismatch."""
    entries = [{"type": "compaction", "input_tokens": 10, "output_tokens": 2_000,
                "cache_read_input_tokens": 50_000},
               {"type": "message", "input_tokens": 5, "output_tokens": 300,
                "cache_read_input_tokens": 60_000}]
    top = {"input_tokens": 15, "output_tokens": 2_300, "cache_read_input_tokens": 110_000}
    reqs, kinds = parsed_both(jsonl(assistant(ts=TS, usage={**top, "iterations": entries})))
    (req,) = reqs.values()
    assert (req.input, req.output, req.cache_read) == (15, 2_300, 110_000)
    assert kinds == {}
    off = {**top, "output_tokens": 2_301, "iterations": entries}
    reqs, kinds = parsed_both(jsonl(assistant(ts=TS, usage=off)))
    assert next(iter(reqs.values())).output == 2_301  # the top level stays what is billed
    assert kinds == {"mismatch": 1}


def test_unknown_iteration_type_is_counted_never_priced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """An undocumented type is counted by its name, adds no request and no cost; never an error."""
    usage = {"input_tokens": 4, "output_tokens": 683, "iterations": [
        {"type": "message", "input_tokens": 4, "output_tokens": 683},
        {**ADVISOR_ENTRY, "type": "critic_message"},
        {**ADVISOR_ENTRY, "type": "Weird Type!"}]}
    record = assistant(model="claude-sonnet-5", ts=TS, usage=usage)
    reqs, kinds = parsed_both(jsonl(record))
    assert list(reqs) == ["msg_1\x1freq_1"]
    assert kinds == {"unknown:critic_message": 1, "unknown": 1}
    write(tmp_path / "tree", "s1.jsonl", record)
    got = report(tmp_path / "tree", tmp_path / "state", capsys)
    assert got["totals"]["cost_usd"] == EXECUTOR_USD
    assert got["iterations"] == {"unknown": 1, "unknown:critic_message": 1}
    assert main(["report", "--full", "--data-dir", str(tmp_path / "tree"),
                 "--state-dir", str(tmp_path / "state")]) == 0
    text = capsys.readouterr().out
    assert "type critic_message" in text and "1 not priced" in text


def test_thinking_tokens_are_part_of_output() -> None:
    """``output_tokens_details.thinking_tokens`` is inside output: never added again."""
    usage = {"input_tokens": 4, "output_tokens": 700,
             "output_tokens_details": {"thinking_tokens": 500}}
    reqs, _ = parsed_both(jsonl(assistant(ts=TS, usage=usage)))
    assert next(iter(reqs.values())).output == 700


@pytest.mark.parametrize("entry", [
    {**ADVISOR_ENTRY, "input_tokens": -1},
    {**ADVISOR_ENTRY, "output_tokens": "12"},
    {**ADVISOR_ENTRY, "cache_creation": [1]},
    {**ADVISOR_ENTRY, "type": 7},
    "advisor_message",
    None,
])
def test_bad_entry_is_counted_and_the_line_kept(entry: Any) -> None:
    """A malformed entry is counted as ``bad``; the line's own request is kept, nothing guessed."""
    usage = {"input_tokens": 4, "output_tokens": 683, "iterations": [entry]}
    reqs, kinds = parsed_both(jsonl(assistant(ts=TS, usage=usage)))
    assert list(reqs) == ["msg_1\x1freq_1"]
    assert kinds == {"bad": 1}


def test_iterations_of_another_shape_are_ignored() -> None:
    """``iterations`` that is not a list (an object, a number) changes and rejects nothing."""
    for odd in ({"type": "advisor_message"}, 3, "x"):
        usage = {"input_tokens": 4, "output_tokens": 683, "iterations": odd}
        reqs, kinds = parsed_both(jsonl(assistant(ts=TS, usage=usage)))
        assert [r.output for r in reqs.values()] == [683]
        assert kinds == {}


def test_a_rejected_line_adds_no_part() -> None:
    """A line rejected for its own usage (negative input) leaves no consultation behind."""
    usage = {**ADVISOR_USAGE, "input_tokens": -4}
    for fast in (True, False):
        parsed = parse_lines(jsonl(assistant(ts=TS, usage=usage)), now=NOW, fast=fast)
        assert parsed.requests == {}
        assert dict(parsed.counts.rejected) == {"negative_tokens": 1}


def test_advisor_of_a_progress_copy_merges_with_the_subagent_file() -> None:
    """A subagent's consultation seen in its file and in an agent_progress copy counts once."""
    inner = assistant("m9", "r9", ts=TS, sidechain=True, agent="a1", model="claude-sonnet-5",
                      usage=ADVISOR_USAGE)
    progress = {"type": "progress", "sessionId": "s1", "cwd": "/home/u/proj", "timestamp": TS,
                "data": {"type": "agent_progress", "agentId": "a1", "message": inner}}
    reqs, kinds = parsed_both(jsonl(inner, progress))
    assert len(reqs) == 2
    part = reqs["m9\x1fr9\x1eadvisor_message\x1fclaude-opus-5\x1f0"]
    assert (part.source, part.output) == (Source.ADVISOR, 18_716)
    assert kinds == {"advisor": 2}  # entries as read, per line


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_tree_with_iterations_equals_the_truth(
    seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A generated tree with advisor, fallback, compaction and unknown iterations: every figure."""
    truth = generate(tmp_path / "tree", GenOptions(seed=seed, sessions=6, iterations=True))
    assert truth["by_source"]["advisor"]["requests"] > 0
    assert {"advisor", "fallback", "superseded", "unknown:critic_message"} <= set(
        truth["iterations"])
    got = report(tmp_path / "tree", tmp_path / "state", capsys)
    assert_matches(got, truth)
    assert got["iterations"] == truth["iterations"]  # nothing counted the truth has not
    # A --source filter answers by the row walk, not the stored bins: the same distributions.
    every = [f"--source={s}" for s in ("main", "subagent", "compaction", "advisor")]
    walked = report(tmp_path / "tree", tmp_path / "state", capsys, *every)
    for figure in ("totals", "context_tokens", "output_tokens", "kv_bytes", "upload_bytes"):
        assert_matches(walked[figure], truth[figure])


def test_metrics_show_the_consultation_and_count_iterations(tmp_path: Path) -> None:
    """/metrics: the consultation as advisor, in no histogram; iteration kinds, also restarted."""
    parsed = parse_lines(jsonl(
        assistant(model="claude-sonnet-5", ts="2026-09-21T12:00:00.000Z", usage=ADVISOR_USAGE),
        assistant("m2", "r2", ts="2026-09-21T12:00:05.000Z", usage=FALLBACK_USAGE,
                  model="claude-opus-4-8")), now=NOW)
    clock = Clock(T0 + 400_000)
    proj, registry, ledger = loaded(tmp_path, [], clock)
    proj.apply(ledger.apply(parsed, [], 0, appearances(parsed.requests.values())))
    proj.apply(ledger.settle(force=True))
    fams = families(generate_latest(registry).decode())
    assert total(fams, "claude_code_requests", source="advisor", model="claude-opus-5") == 1
    assert total(fams, "claude_code_tokens", source="advisor", type="output") == 18_716
    assert abs(total(fams, "claude_code_cost_usd", source="advisor") - ADVISOR_USD) < 1e-6
    counts = "claude_code_request_context_tokens_count"
    assert total(fams, "claude_code_request_context_tokens", counts, source="advisor") == 0
    assert total(fams, "claude_code_request_context_tokens", counts) == 2
    assert total(fams, "claude_code_upload_bytes") == 4 * (4 + 3 + 54_112)
    assert total(fams, "claude_code_exporter_iterations", kind="advisor") == 1
    assert total(fams, "claude_code_exporter_iterations", kind="superseded") == 1
    assert total(fams, "claude_code_exporter_lines", result="usage") == 2
    ledger.close()
    again = Ledger(tmp_path / "ledger.sqlite3", readonly=True)
    restarted, registry2 = projection(clock)
    restarted.load(again)
    fams = families(generate_latest(registry2).decode())
    assert total(fams, "claude_code_exporter_iterations", kind="fallback") == 1
    assert total(fams, "claude_code_exporter_iterations", kind="unknown") == 0
    assert total(fams, "claude_code_requests", source="advisor") == 1
    again.close()


def test_backfill_ends_at_what_serve_shows_with_consultations(tmp_path: Path) -> None:
    """Backfill of a tree with iterations: its last points are serve's start-up values."""
    generate(tmp_path / "tree", GenOptions(seed=3, sessions=3, iterations=True))
    ledger = ingest(tmp_path / "tree", tmp_path / "state")
    try:
        requests = ledger.requests()
        assert any(r.source is Source.ADVISOR for r in requests)
        _, points = backfill.parse(backfill.history(requests))
        last = max(t for series in points.values() for t, _ in series)
        assert backfill.at(points, last) == backfill.startup(ledger)
    finally:
        ledger.close()


@pytest.mark.parametrize("view", ["daily", "session", "project", "blocks"])
def test_views_add_up_to_the_summary_with_consultations(
    view: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Each view's rows (consultations in them) add up to the summary; --source advisor too."""
    generate(tmp_path / "tree", GenOptions(seed=4, sessions=3, iterations=True))
    summary = report(tmp_path / "tree", tmp_path / "state", capsys)
    assert main(["report", view, "--json", "--data-dir", str(tmp_path / "tree"),
                 "--state-dir", str(tmp_path / "state")]) == 0
    rows = json.loads(capsys.readouterr().out)
    for figure in ("requests", "input_tokens", "output_tokens", "cost_usd"):
        assert rows["totals"][figure] == summary["totals"][figure]
    advisor = report(tmp_path / "tree", tmp_path / "state", capsys, "--source", "advisor")
    assert advisor["totals"] == {**summary["by_source"]["advisor"]}
