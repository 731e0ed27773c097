"""`serve` as a process over generated transcripts, checked by real HTTP scrapes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.synth import GenOptions, generate
from tests.support.exposition import counter_samples, total
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll

# The catalogue of shared/design/metrics.md: type, label names, bucket bounds.
MTL = ("model", "project", "source")
CATALOGUE: dict[str, tuple[str, tuple[str, ...]]] = {
    "claude_code_requests": ("counter", MTL),
    "claude_code_tokens": ("counter", (*MTL, "type")),
    "claude_code_cost_usd": ("counter", (*MTL, "type")),
    "claude_code_unpriced_tokens": ("counter", ("model",)),
    "claude_code_prompt_tokens_after_gap": ("counter", ("gap", "type")),
    "claude_code_requests_after_gap": ("counter", ("gap",)),
    "claude_code_upload_bytes": ("counter", ()),
    "claude_code_kv_recomputed_bytes": ("counter", ("arch",)),
    "claude_code_request_context_tokens": ("histogram", ("model", "source")),
    "claude_code_request_output_tokens": ("histogram", ("model", "source")),
    "claude_code_request_gap_seconds": ("histogram", ()),
    "claude_code_request_kv_cache_bytes": ("histogram", ("arch",)),
    "claude_code_request_upload_bytes": ("histogram", ()),
    "claude_code_active_sessions": ("gauge", ("ttl",)),
    "claude_code_warm_kv_cache_bytes": ("gauge", ("arch",)),
    "claude_code_last_request_timestamp_seconds": ("gauge", ("source",)),
    "claude_code_budget_usd": ("gauge", ("period",)),
    "claude_code_kv_bytes_per_token": ("gauge", ("arch",)),
    "claude_code_exporter_lines": ("counter", ("result",)),
    "claude_code_exporter_rejected_lines": ("counter", ("reason",)),
    "claude_code_exporter_bytes_read": ("counter", ()),
    "claude_code_exporter_files_watched": ("gauge", ()),
    "claude_code_exporter_ledger_requests": ("gauge", ()),
    "claude_code_exporter_build_info": ("gauge", ("version", "prices", "prices_version",
                                                  "prices_data_date")),
}
BUCKETS: dict[str, list[float]] = {
    "claude_code_request_context_tokens": [1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1.5e5, 2e5, 3e5,
                                           4e5, 5e5, 6e5, 8e5, 1e6],
    "claude_code_request_output_tokens": [10, 25, 50, 100, 250, 500, 1e3, 2e3, 4e3, 8e3, 1.6e4,
                                          3.2e4, 6.4e4],
    "claude_code_request_gap_seconds": [1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300,
                                        600, 900, 1800, 3600, 7200, 14400, 43200, 86400],
    "claude_code_request_kv_cache_bytes": [1e7, 1e8, 1e9, 2.5e9, 5e9, 1e10, 2.5e10, 5e10, 1e11,
                                           2.5e11, 5e11, 1e12],
    "claude_code_request_upload_bytes": [1e4, 1e5, 2.5e5, 5e5, 1e6, 2e6, 4e6, 8e6],
}
TOKEN_TYPES = {"input": "input_tokens", "output": "output_tokens",
               "cache_read": "cache_read_tokens", "cache_write_5m": "cache_write_5m_tokens",
               "cache_write_1h": "cache_write_1h_tokens"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A generated tree, its truth, and a running daemon over it."""
    base = tmp_path_factory.mktemp("e2e")
    tree = base / "claude"
    truth = generate(tree, GenOptions(seed=11, sessions=5, requests_per_session=60))
    daemon = Serve(tree, base / "state", "--budget-day-usd", "25")
    poll(lambda: daemon.scrape()["claude_code_request_context_tokens"].samples
         and _settled(daemon, truth), 30, "histograms settled")
    state: dict[str, Any] = {"base": base, "tree": tree, "truth": truth, "daemon": daemon}
    yield state
    state["daemon"].stop()  # a test may have replaced it by a restarted daemon


def _settled(daemon: Serve, truth: dict[str, Any]) -> bool:
    fams = daemon.scrape()
    name = "claude_code_request_context_tokens"
    got = total(fams, name, name + "_count")
    return bool(got == truth["totals"]["requests"])


def test_every_catalogue_family_with_type_labels_and_buckets(world: dict[str, Any]) -> None:
    """Each family of metrics.md is exposed with its type, exact label names and bounds."""
    fams = world["daemon"].scrape()
    for name, (kind, labels) in CATALOGUE.items():
        assert name in fams, name
        fam = fams[name]
        assert fam.type == kind, name
        plain = [s for s in fam.samples if not s.name.endswith(("_created",))]
        assert plain, f"{name} has no samples"
        for s in plain:
            assert set(s.labels) - {"le"} == set(labels), (name, s.labels)
    for name, bounds in BUCKETS.items():
        les = sorted({float(s.labels["le"]) for s in fams[name].samples
                      if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"})
        assert les == sorted(bounds), name


def test_counters_equal_the_generator_truth(world: dict[str, Any]) -> None:
    """Requests, tokens by type, cost and unpriced tokens equal the ground truth."""
    fams, truth = world["daemon"].scrape(), world["truth"]["totals"]
    assert total(fams, "claude_code_requests") == truth["requests"]
    for label, key in TOKEN_TYPES.items():
        assert total(fams, "claude_code_tokens", type=label) == truth[key], label
    assert total(fams, "claude_code_cost_usd") == pytest.approx(truth["cost_usd"], abs=0.005)
    assert total(fams, "claude_code_unpriced_tokens") == truth["unpriced_tokens"]
    for source, t in world["truth"]["by_source"].items():
        assert total(fams, "claude_code_requests", source=source) == t["requests"], source


def test_histograms_match_request_counts_and_gap_buckets(world: dict[str, Any]) -> None:
    """Histogram counts equal requests; gap buckets at 300 s and 3600 s equal the truth."""
    fams, truth = world["daemon"].scrape(), world["truth"]
    n = truth["totals"]["requests"]
    for name in ("claude_code_request_context_tokens", "claude_code_request_output_tokens",
                 "claude_code_request_upload_bytes"):
        assert total(fams, name, name + "_count") == n, name
    assert total(fams, "claude_code_request_kv_cache_bytes",
                 "claude_code_request_kv_cache_bytes_count", arch="mla") == n
    by_gap = truth["requests_by_gap"]
    gap = "claude_code_request_gap_seconds"
    assert total(fams, gap, gap + "_count") == truth["gap_seconds"]["count"]
    assert total(fams, gap, gap + "_bucket", le="300") == by_gap["lt_5m"]
    assert total(fams, gap, gap + "_bucket", le="3600") == by_gap["lt_5m"] + by_gap["5m_to_1h"]
    for bucket, count in by_gap.items():
        assert total(fams, "claude_code_requests_after_gap", gap=bucket) == count, bucket
    assert total(fams, "claude_code_exporter_lines", result="rejected") == truth["rejected_lines"]
    assert total(fams, "claude_code_budget_usd", period="day") == 25


def test_appended_lines_and_new_files_appear(world: dict[str, Any]) -> None:
    """A line appended to a live file and a new session file show up in /metrics."""
    daemon, tree = world["daemon"], world["tree"]
    before = total(daemon.scrape(), "claude_code_requests")
    live = sorted((tree / "projects").glob("*/*.jsonl"))[0]
    with live.open("ab") as fh:
        fh.write(jsonl(assistant("msg_e2e_append", "req_e2e_append", session="e2e")))
    poll(lambda: total(daemon.scrape(), "claude_code_requests") == before + 1, 20, "append")
    new_dir = tree / "projects" / "-home-u-brand-new"
    new_dir.mkdir()
    fresh = jsonl(assistant("msg_e2e_new", "r", cwd="/home/u/brand-new"))
    (new_dir / "fresh.jsonl").write_bytes(fresh)
    fams = poll(lambda: (f := daemon.scrape()) and total(f, "claude_code_requests",
                                                          project="brand-new") == 1 and f,
                20, "new file")
    assert total(fams, "claude_code_requests") == before + 2


def test_restart_with_more_data_and_after_deletion_never_decreases(world: dict[str, Any]) -> None:
    """Restarting with more transcripts, then after deleting them, no counter goes down."""
    daemon, tree, base = world["daemon"], world["tree"], world["base"]
    before = counter_samples(daemon.scrape())
    assert daemon.stop() == 0
    extra = base / "extra"
    more = generate(extra, GenOptions(seed=12, sessions=2, requests_per_session=30,
                                      malformed=False))
    shutil.copytree(extra / "projects", tree / "projects", dirs_exist_ok=True)
    second = Serve(tree, base / "state")
    try:
        grown = counter_samples(second.scrape())
        _no_decrease(before, grown)
        assert total(second.scrape(), "claude_code_requests") == (
            world["truth"]["totals"]["requests"] + 2 + more["totals"]["requests"])
    finally:
        assert second.stop() == 0
    shutil.rmtree(tree / "projects")
    third = Serve(tree, base / "state")
    world["daemon"] = third
    after = counter_samples(third.scrape())
    _no_decrease(grown, after)
    assert json.loads(_get_health(third))["ok"] is True


def _get_health(daemon: Serve) -> str:
    import urllib.request

    with urllib.request.urlopen(daemon.url + "/healthz", timeout=5) as resp:
        return str(resp.read().decode())


def _no_decrease(old: dict[Any, float], new: dict[Any, float]) -> None:
    """Every sample in ``old`` exists in ``new`` with a value at least as large."""
    shrunk = {k: (v, new.get(k)) for k, v in old.items() if new.get(k, -1) < v}
    assert not shrunk, shrunk


def test_polling_mode_follows_streaming_upgrades(tmp_path: Path) -> None:
    """With --poll (no file events) a streamed response is followed to its final figures."""
    proj = tmp_path / "tree" / "projects" / "-home-u-poll"
    proj.mkdir(parents=True)
    live = proj / "s.jsonl"
    live.write_bytes(jsonl(assistant("msg_old", "req_old", cwd="/home/u/poll")))
    daemon = Serve(tmp_path / "tree", tmp_path / "state", "--poll", "--rescan-seconds", "0.3")
    try:
        partial = {"input_tokens": 4, "output_tokens": 2, "cache_read_input_tokens": 1000}
        final = {**partial, "output_tokens": 640}
        with live.open("ab") as fh:
            fh.write(jsonl(assistant("msg_s", "req_s", cwd="/home/u/poll", usage=partial)))
        poll(lambda: total(daemon.scrape(), "claude_code_requests") == 2, 20, "partial line")
        with live.open("ab") as fh:
            fh.write(jsonl(assistant("msg_s", "req_s", cwd="/home/u/poll", usage=final)))
        poll(lambda: total(daemon.scrape(), "claude_code_tokens", type="output") == 10 + 640,
             20, "final output tokens")
        fams = daemon.scrape()
        assert total(fams, "claude_code_requests") == 2
        assert total(fams, "claude_code_exporter_lines", result="duplicate") == 1
        out = "claude_code_request_output_tokens"
        poll(lambda: total(daemon.scrape(), out, out + "_sum") == 10 + 640, 20, "settled")
    finally:
        assert daemon.stop() == 0
