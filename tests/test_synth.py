"""Tests of the transcript generator (exporter.synth) and its ground truth.

The truth is cross-checked against a deliberately plain re-parse of the written
files (stdlib ``json``, no exporter code), so neither side can hide a mistake
of the other.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from exporter.synth import GenOptions, generate
from exporter.synth.model import SimRequest
from exporter.synth.truth import cost_nano_usd
from tests.support.records import REPORT_KEYS

SMALL = GenOptions(seed=11, sessions=4, requests_per_session=50)
TOKEN_FIELDS = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
T_KEYS = {
    "cache_savings_usd",
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "cost_usd",
    "unpriced_tokens",
}


# --- a plain, independent parse of the tree ------------------------------------------------


@dataclass
class Req:
    """One deduplicated request as the plain parse sees it."""

    ts: int
    session: str
    source: int  # 0 main, 1 subagent, 2 compaction
    model: str
    tokens: list[int]
    prev: int | None = None  # latest earlier main request of any file holding it (ms)

    @property
    def context(self) -> int:
        """Input + cache read + cache writes."""
        return self.tokens[0] + sum(self.tokens[2:])


@dataclass
class Scan:
    """Everything the plain parse found."""

    reqs: dict[str, Req] = field(default_factory=dict)
    usage_lines: int = 0
    other: int = 0
    rejected: int = 0
    total_lines: int = 0
    usage_keys_by_file: dict[Path, list[str]] = field(default_factory=dict)
    session_of: dict[Path, str] = field(default_factory=dict)  # the session a file's lines carry


def _ms(stamp: Any) -> int:
    """Epoch milliseconds of an ISO timestamp; raises on anything else."""
    return round(datetime.fromisoformat(stamp).timestamp() * 1000)


def _count(obj: dict[str, Any], name: str) -> int:
    """A token count, which must be a non-negative int when present."""
    value = obj.get(name, 0)
    if type(value) is not int or value < 0:
        raise ValueError(name)
    return value


def _usage_record(d: dict[str, Any]) -> tuple[dict[str, Any], bool] | None:
    """The assistant record a line carries (top level or agent_progress), and if embedded."""
    data = d.get("data")
    if d.get("type") == "assistant":
        return d, False
    if d.get("type") != "progress" or not isinstance(data, dict):
        return None
    inner = data.get("message")
    if data.get("type") == "agent_progress" and isinstance(inner, dict):
        return (inner, True) if inner.get("type") == "assistant" else None
    return None


def _classify(raw: bytes, compaction_file: bool) -> tuple[str, Req] | str:
    """``"other"``, ``"rejected"`` or ``(key, request copy)`` for one line."""
    try:
        d = json.loads(raw.decode("utf-8"))
        found = _usage_record(d)
    except (ValueError, AttributeError):  # bad bytes, bad JSON, not an object
        return "rejected"
    if found is None:
        return "other"
    rec, embedded = found
    msg = rec["message"]
    if "usage" not in msg or msg.get("model") == "<synthetic>" or d.get("isApiErrorMessage"):
        return "other"
    try:
        use = msg["usage"]
        detail = use.get("cache_creation")
        created = _count(use, "cache_creation_input_tokens")
        w1h = _count(detail, "ephemeral_1h_input_tokens") if detail is not None else 0
        tokens = [
            _count(use, "input_tokens"),
            _count(use, "output_tokens"),
            _count(use, "cache_read_input_tokens"),
            created - w1h,
            w1h,
        ]
        key = msg["id"] + ("\x1f" + rec["requestId"] if rec.get("requestId") else "")
        ts = _ms(rec["timestamp"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return "rejected"
    agent = str((rec if embedded else d).get("agentId") or "")
    if embedded and not agent:
        agent = str(d["data"].get("agentId") or "")
    source = 0
    if embedded or d.get("isSidechain"):
        source = 2 if compaction_file or agent.startswith("acompact") else 1
    return key, Req(ts, d["sessionId"], source, msg["model"], tokens)


def scan(root: Path) -> Scan:
    """Re-derive the request set and line counts from the files alone."""
    out = Scan()
    for path in sorted((root / "projects").rglob("*.jsonl")):
        data = path.read_bytes()
        assert data.endswith(b"\n")
        keys = out.usage_keys_by_file.setdefault(path, [])
        for raw in data.split(b"\n")[:-1]:
            out.total_lines += 1
            got = _classify(raw, path.name.startswith("agent-acompact"))
            if isinstance(got, str):
                out.rejected += got == "rejected"
                out.other += got == "other"
            else:
                key, req = got
                keys.append(key)
                out.session_of[path] = min(out.session_of.get(path, req.session), req.session)
                out.usage_lines += 1
                old = out.reqs.get(key)
                if old is None:
                    out.reqs[key] = req
                    continue
                old.tokens = [max(a, b) for a, b in zip(old.tokens, req.tokens, strict=True)]
                old.ts, old.session = min((old.ts, old.session), (req.ts, req.session))
                old.source = max(old.source, req.source)
    _conversations(out)
    return out


def _conversations(out: Scan) -> None:
    """Owners and gaps by conversation, from which files hold which keys (docs/figures.md)."""
    held: dict[str, set[str]] = defaultdict(set)
    chains: list[list[str]] = []
    for path, keys in out.usage_keys_by_file.items():
        if keys:
            held[out.session_of[path]].update(keys)
            chains.append(sorted({k for k in keys if out.reqs[k].source == 0},
                                 key=lambda k: (out.reqs[k].ts, k)))
    last = {s: max(out.reqs[k].ts for k in keys) for s, keys in held.items()}
    for key, req in out.reqs.items():
        req.session = min((last[s], s) for s, keys in held.items() if key in keys)[1]
    for chain in chains:
        for key, before in zip(chain[1:], chain, strict=False):
            prev = out.reqs[before].ts
            mine = out.reqs[key]
            mine.prev = prev if mine.prev is None else max(mine.prev, prev)


def rank(values: list[int], p: int) -> int:
    """Nearest-rank percentile of unsorted values (0 when empty)."""
    ordered = sorted(values)
    return ordered[math.ceil(p / 100 * len(ordered)) - 1] if ordered else 0


def main_gaps(reqs: list[Req]) -> list[tuple[Req, int | None]]:
    """Main requests in time order with the gap (ms) since their conversation's previous one."""
    return [(r, None if r.prev is None else r.ts - r.prev)
            for r in sorted((r for r in reqs if r.source == 0), key=lambda r: r.ts)]


def bucket(gap: int | None) -> str:
    """The gap bucket of docs/figures.md."""
    if gap is None:
        return "first"
    return "lt_5m" if gap <= 300_000 else "5m_to_1h" if gap <= 3_600_000 else "gt_1h"


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Scan]:
    """One small generated tree, its truth and its plain re-parse."""
    root = tmp_path_factory.mktemp("synth")
    truth = generate(root, SMALL)
    return root, truth, scan(root)


def _files(root: Path) -> dict[str, bytes]:
    """Every file under root, by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


# --- tests ----------------------------------------------------------------------------------


def test_same_seed_gives_identical_bytes_and_truth(tmp_path: Path) -> None:
    """The same seed writes byte-identical trees and the same truth; another seed differs."""
    options = GenOptions(seed=5, sessions=3, requests_per_session=30)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert generate(a, options) == generate(b, options)
    assert _files(a) == _files(b)
    generate(c, GenOptions(seed=6, sessions=3, requests_per_session=30))
    assert _files(a) != _files(c)


def test_truth_file_matches_return_value_and_shape(tree: tuple[Path, dict[str, Any], Scan]) -> None:
    """truth.json holds the returned dict, with exactly the report --json keys."""
    root, truth, _ = tree
    assert json.loads((root / "truth.json").read_text()) == truth
    assert set(truth) == REPORT_KEYS
    for t in [truth["totals"], *truth["by_model"].values(), *truth["by_source"].values()]:
        assert set(t) == T_KEYS
    assert set(truth["by_source"]) == {"main", "subagent", "compaction"}
    assert set(truth["kv_bytes"]) == {"mla", "gqa"}


def test_breakdowns_sum_to_totals(tree: tuple[Path, dict[str, Any], Scan]) -> None:
    """by_model and by_source each add up to the totals; the line counts add up too."""
    _, truth, _ = tree
    for part in ("by_model", "by_source"):
        for key in T_KEYS:
            summed = sum(t[key] for t in truth[part].values())
            assert summed == pytest.approx(truth["totals"][key], abs=1e-6), (part, key)
    assert truth["rejected_lines"] == truth["lines"]["rejected"]
    assert truth["rejected_lines"] == sum(truth["rejected_by_reason"].values())
    assert truth["lines"]["usage"] == truth["totals"]["requests"]
    assert sum(truth["requests_by_gap"].values()) == truth["by_source"]["main"]["requests"]
    # A resumed session continues a conversation: it owns requests but starts none.
    assert 0 < truth["requests_by_gap"]["first"] <= truth["sessions"]


def test_truth_agrees_with_a_plain_reparse(tree: tuple[Path, dict[str, Any], Scan]) -> None:
    """Every token, percentile, gap and line figure re-derived from the files equals the truth."""
    _, truth, s = tree
    reqs = list(s.reqs.values())
    totals = truth["totals"]
    assert totals["requests"] == len(reqs)
    for i, name in enumerate(TOKEN_FIELDS):
        key = "cache_read_tokens" if name == "cache_read" else f"{name}_tokens"
        assert totals[key] == sum(r.tokens[i] for r in reqs), name
    for src, label in enumerate(("main", "subagent", "compaction")):
        assert truth["by_source"][label]["requests"] == sum(r.source == src for r in reqs)
    assert truth["sessions"] == len({r.session for r in reqs})
    contexts, outputs = [r.context for r in reqs], [r.tokens[1] for r in reqs]
    assert truth["context_tokens"] == {
        "p50": rank(contexts, 50),
        "p90": rank(contexts, 90),
        "max": max(contexts),
    }
    assert truth["output_tokens"] == {
        "p50": rank(outputs, 50),
        "p90": rank(outputs, 90),
        "max": max(outputs),
    }
    chain = main_gaps(reqs)
    gaps = [g for _, g in chain if g is not None]
    assert truth["gap_seconds"] == {
        "p50": rank(gaps, 50) / 1000,
        "p90": rank(gaps, 90) / 1000,
        "count": len(gaps),
    }
    by_gap = Counter(bucket(g) for _, g in chain)
    assert truth["requests_by_gap"] == {
        b: by_gap[b] for b in ("first", "lt_5m", "5m_to_1h", "gt_1h")
    }
    per_minute = Counter(r.ts // 60_000 for r in reqs)
    assert truth["peak_requests_per_minute"] == max(per_minute.values())
    windows: dict[int, set[str]] = defaultdict(set)
    for r in reqs:
        windows[r.ts // 600_000].add(r.session)
    assert truth["max_parallel_sessions_10m"] == max(map(len, windows.values()))
    assert truth["lines"] == {
        "usage": len(reqs),
        "duplicate": s.usage_lines - len(reqs),
        "other": s.other,
        "rejected": s.rejected,
    }
    assert sum(truth["lines"].values()) == s.total_lines


def test_every_trap_is_in_the_tree(tree: tuple[Path, dict[str, Any], Scan]) -> None:
    """Progress copies, acompact/workflow/old-layout files and each malformed kind exist."""
    root, truth, s = tree
    projects = root / "projects"
    paths = [p.relative_to(projects) for p in projects.rglob("*.jsonl")]
    assert any(p.name.startswith("agent-acompact-") and p.parts[-2] == "subagents" for p in paths)
    assert any("workflows" in p.parts for p in paths)
    assert any(len(p.parts) == 2 and p.name.startswith("agent-") for p in paths)  # 2.0.x layout
    assert any(
        p.parts[-2] == "subagents" and len(p.name) == len("agent-a1b2c3d.jsonl") for p in paths
    )
    assert len({p.parts[0] for p in paths}) >= 2  # several projects
    blob = b"".join(p.read_bytes() for p in sorted(projects.rglob("*.jsonl")))
    for needle in (
        b'"agent_progress","prompt"',
        b'"isApiErrorMessage":true',
        b'"speed":"fast"',
        b'"inference_geo":"us"',
        b"msg_bdrk_01",
        b'"version":"1.0.51"',
        b'": ',
        b'\\"usage\\":{',
        b'\\"type\\":\\"assistant\\"',
        b"\x00",
        b"\xff\xfe",
        b"\n[1,2]\n",
        b'\n"str"\n',
        b"\n42\n",
        b'"yesterday"',
        b'"output_tokens":"12"',
        b'"usage":null',
        b'"input_tokens":-5',
        b'"input_tokens":12.5',
    ):
        assert needle in blob, needle
    assert set(truth["rejected_by_reason"]) == {
        "invalid_json",
        "invalid_utf8",
        "not_object",
        "bad_usage",
        "negative_tokens",
        "missing_id",
        "bad_timestamp",
    }
    assert set(truth["by_model"]) == {
        "claude-opus-4-6",
        "claude-sonnet-4-5-20250929",
        "claude-haiku-4-5-20251001",
        "claude-nova-9-20261101",
    }
    assert truth["by_model"]["claude-nova-9-20261101"]["unpriced_tokens"] > 0
    assert truth["totals"]["cache_write_1h_tokens"] > 0
    sonnet = [r for r in s.reqs.values() if r.model.startswith("claude-sonnet-4-5")]
    assert any(r.context > 200_000 for r in sonnet)
    assert truth["lines"]["duplicate"] > truth["lines"]["usage"]  # streaming splits and copies


def test_progress_copies_and_resumes_are_counted_once(
    tree: tuple[Path, dict[str, Any], Scan],
) -> None:
    """Keys seen in several files (progress mirrors, resumed replays) are one request each."""
    _, truth, s = tree
    files_of: dict[str, set[Path]] = defaultdict(set)
    for path, keys in s.usage_keys_by_file.items():
        for key in keys:
            files_of[key].add(path)
    shared = [k for k, files in files_of.items() if len(files) > 1]
    mains = {
        p
        for p in s.usage_keys_by_file
        if p.parent.parent.name == "projects" and not p.name.startswith("agent-")
    }
    replayed = [k for k in shared if len(files_of[k] & mains) > 1]
    mirrored = [k for k in shared if len(files_of[k] & mains) == 1 and len(files_of[k]) > 1]
    assert replayed and mirrored
    assert truth["totals"]["requests"] == len(files_of)


def test_resumed_requests_belong_to_the_original_conversation(
    tree: tuple[Path, dict[str, Any], Scan],
) -> None:
    """A replayed request belongs to the session whose last request is earliest (any id order)."""
    _, _, s = tree
    sessions_of: dict[str, set[str]] = defaultdict(set)
    for path, keys in s.usage_keys_by_file.items():
        if path.parent.parent.name == "projects" and not path.name.startswith("agent-"):
            for key in keys:
                sessions_of[key].add(path.stem)
    last: dict[str, int] = defaultdict(int)
    for path, keys in s.usage_keys_by_file.items():
        for key in keys:
            last[s.session_of[path]] = max(last[s.session_of[path]], s.reqs[key].ts)
    orders = set()
    for key, sessions in sessions_of.items():
        if len(sessions) == 2 and s.reqs[key].source == 0:
            original = min(sessions, key=lambda x: (last[x], x))
            assert s.reqs[key].session == original
            orders.add(original == min(sessions))
    assert orders == {True, False}  # the original's id sorts below its copy's, and above
    gaps = [r for r in s.reqs.values() if r.source == 0 and r.prev is not None
            and r.session not in {min(v) for v in sessions_of.values() if len(v) == 2}]
    assert gaps  # resumed sessions' own requests have gaps, the first new one included


def test_gap_distribution_is_seed_shaped(tmp_path: Path) -> None:
    """Gap median is 5-30 s, with some gaps over 5 minutes and some over an hour."""
    truth = generate(tmp_path, GenOptions(seed=3, sessions=6, requests_per_session=80))
    assert 5 <= truth["gap_seconds"]["p50"] <= 30
    assert truth["requests_by_gap"]["5m_to_1h"] > 0
    assert truth["requests_by_gap"]["gt_1h"] > 0
    shares = truth["cache_write_share_by_gap"]
    assert shares["lt_5m"] < 0.1
    assert shares["gt_1h"] > 0.5  # an expired cache is written again
    assert 200 <= truth["output_tokens"]["p50"] <= 1_000
    assert truth["max_parallel_sessions_10m"] >= 2


def test_target_bytes_grows_the_tree(tmp_path: Path) -> None:
    """target_bytes adds sessions until the tree is about that size."""
    small = generate(tmp_path / "s", GenOptions(sessions=2, requests_per_session=20))
    big = generate(
        tmp_path / "b", GenOptions(sessions=2, requests_per_session=20, target_bytes=4_000_000)
    )
    size = sum(p.stat().st_size for p in (tmp_path / "b" / "projects").rglob("*.jsonl"))
    assert 4_000_000 <= size < 7_000_000
    assert big["sessions"] > small["sessions"]


def test_malformed_false_writes_no_rejected_lines(tmp_path: Path) -> None:
    """With malformed=False every line parses and nothing is rejected."""
    truth = generate(
        tmp_path, GenOptions(seed=2, sessions=2, requests_per_session=20, malformed=False)
    )
    assert truth["rejected_lines"] == 0 and truth["rejected_by_reason"] == {}
    assert scan(tmp_path).rejected == 0


def test_all_times_are_whole_ms_after_start(tree: tuple[Path, dict[str, Any], Scan]) -> None:
    """Request times are on or after options.start, so --since filters are predictable."""
    _, _, s = tree
    start = round(SMALL.start.timestamp() * 1000)
    assert min(r.ts for r in s.reqs.values()) >= start
    assert SMALL.start == datetime(2026, 10, 1, tzinfo=UTC)


def test_cost_follows_the_pricing_rules() -> None:
    """The truth's own prices reproduce pricing.md's worked examples and multipliers."""

    def req(model: str, read: int, geo: str = "", speed: str = "") -> SimRequest:
        return SimRequest("m", "r", model, 5, 50, read, 100, 0, geo=geo, speed=speed)

    sonnet = "claude-sonnet-4-5-20250929"
    assert cost_nano_usd(req(sonnet, 1000)) == 1_440_000  # $0.00144
    assert cost_nano_usd(req(sonnet, 250_000)) == 151_905_000  # $0.151905: all at premium
    assert cost_nano_usd(req(sonnet, 1000, geo="us")) == 1_584_000  # ×1.1
    opus = cost_nano_usd(req("claude-opus-4-6", 1000))
    assert opus is not None
    assert cost_nano_usd(req("claude-opus-4-6", 1000, speed="fast")) == 6 * opus
    assert cost_nano_usd(req("claude-nova-9-20261101", 1000)) is None


def test_the_demo_has_a_month_of_days_and_report_counts_every_request(tmp_path: Path) -> None:
    """``serve --demo``'s history: a request on each of the last 30 days, none ahead of now."""
    import subprocess
    import sys
    import time

    from exporter.synth.demo import history

    now = time.time()
    requests = history(tmp_path / "demo", now, seed=5)
    proc = subprocess.run([sys.executable, "-m", "exporter", "report", "daily", "--json",
                           "--timezone", "UTC", "--data-dir", str(tmp_path / "demo"),
                           "--state-dir", str(tmp_path / "state"), "--since", "31d"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["totals"]["requests"] == requests
    days = {row["period"] for row in got["rows"] if row["requests"]}
    assert len(days) >= 30, sorted(days)
    assert all(row["period"] <= time.strftime("%Y-%m-%d", time.gmtime(now + 86_400))
               for row in got["rows"])
