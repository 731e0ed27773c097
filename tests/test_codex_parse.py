"""The Codex parser: each turn once by its place in the cumulative totals, whatever the copies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exporter.ingest import codex
from exporter.ingest.scan import read_files
from exporter.records import Checkpoint, MendKind, Parsed, RejectReason

NOW = 1_800_000_000.0  # 2027-01-15
SID = "019f5c38-3fff-7d61-a63b-76dc0bb6aa56"
FORK = "019f5c39-4e68-7600-b85e-ee21735fc481"


def _at(seconds: float) -> str:
    """An ISO time ``seconds`` after 2026-07-13T16:00:00Z, as Codex writes it."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(1_783_958_400 + seconds, UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def meta(sid: str, t: float = 0, **extra: Any) -> dict[str, Any]:
    """A ``session_meta`` line."""
    return {"timestamp": _at(t), "type": "session_meta",
            "payload": {"id": sid, "cwd": "/w/proj", "cli_version": "0.121.0", **extra}}


def context(model: str, t: float, turn_id: str = "") -> dict[str, Any]:
    """A ``turn_context`` line."""
    return {"timestamp": _at(t), "type": "turn_context",
            "payload": {"model": model, "cwd": "/w/proj", "turn_id": turn_id}}


def usage(i: int, c: int, o: int, r: int) -> dict[str, int]:
    """A usage object (input includes cached)."""
    return {"input_tokens": i, "cached_input_tokens": c, "output_tokens": o,
            "reasoning_output_tokens": r, "total_tokens": i + o}


def count(t: float, total: tuple[int, int, int, int], last: tuple[int, int, int, int] | None,
          ) -> dict[str, Any]:
    """A ``token_count`` event (``last`` None: the key left out)."""
    info: dict[str, Any] = {"total_token_usage": usage(*total), "model_context_window": 258400}
    if last is not None:
        info["last_token_usage"] = usage(*last)
    return {"timestamp": _at(t), "type": "event_msg",
            "payload": {"type": "token_count", "info": info, "rate_limits": None}}


def write(path: Path, lines: Sequence[dict[str, Any] | bytes]) -> Path:
    """A rollout file of ``lines`` (objects as JSON, bytes as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(
        (x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines))
    return path


def parse(home: Path, *cps: tuple[Path, Checkpoint | None], now: float = NOW) -> Any:
    """Read files of a Codex home (each from its checkpoint) as a scan's worker does."""
    return read_files([(str(p), cp) for p, cp in cps], now,
                      agents=((str(home / "sessions"), codex.AGENT),))


def rollout(home: Path, sid: str, name: str = "") -> Path:
    """The path of a session's rollout file."""
    day = home / "sessions" / "2026" / "07" / "13"
    return day / (name or f"rollout-2026-07-13T16-00-00-{sid}.jsonl")


SESSION = [meta(SID), context("gpt-5.5", 1),
           {"timestamp": _at(2), "type": "event_msg",
            "payload": {"type": "token_count", "info": None}},
           count(10, (1000, 200, 50, 10), (1000, 200, 50, 10)),
           count(11, (1000, 200, 50, 10), (1000, 200, 50, 10)),  # repeated
           count(70, (3000, 1200, 80, 10), (2000, 1000, 30, 0)),
           count(71, (3000, 1200, 80, 10), (0, 0, 0, 0))]  # repeated after a compaction


def _tokens(parsed: Parsed) -> list[tuple[int, int, int, int, int]]:
    """(input, cache read, output, reasoning, cache writes) of each turn, in key order."""
    return [(r.input, r.cache_read, r.output, r.reasoning, r.cache_write)
            for _, r in sorted(parsed.requests.items())]


def test_a_turn_is_counted_once_and_repeats_are_duplicates(tmp_path: Path) -> None:
    """Repeated events (even with zeros after a compaction) are duplicate lines of one turn."""
    path = write(rollout(tmp_path, SID), SESSION)
    parsed = parse(tmp_path, (path, None)).parsed
    assert _tokens(parsed) == [(800, 200, 50, 10, 0), (1000, 1000, 30, 0, 0)]
    assert parsed.counts.usage_lines == 4 and parsed.counts.other == 3
    assert {r.model for r in parsed.requests.values()} == {"gpt-5.5"}
    assert {r.session for r in parsed.requests.values()} == {SID}
    assert {r.project for r in parsed.requests.values()} == {"/w/proj"}


def test_a_read_that_starts_mid_file_carries_the_state(tmp_path: Path) -> None:
    """Reading a growing file in two parts gives the turns one read gives (the carried state)."""
    whole = parse(tmp_path / "a", (write(rollout(tmp_path / "a", SID), SESSION), None)).parsed
    path = write(rollout(tmp_path / "b", SID), SESSION[:4])
    first = parse(tmp_path / "b", (path, None))
    write(path, SESSION)
    second = parse(tmp_path / "b", (path, first.checkpoints[0]))
    assert first.checkpoints[0].carry
    both = first.parsed
    both.update(second.parsed)
    assert both.requests == whole.requests


def test_copies_in_other_files_merge_into_one_turn(tmp_path: Path) -> None:
    """A snapshot copy and an archived copy hold the same keys: one row per turn."""
    one = write(rollout(tmp_path, SID), SESSION)
    snap = write(tmp_path / "sessions" / "2026" / "07" / "14" / one.name, SESSION[:4])
    parsed = parse(tmp_path, (one, None), (snap, None)).parsed
    assert len(parsed.requests) == 2
    assert parsed.counts.usage_lines == 5


def test_a_fork_copy_of_its_parent_counts_once_with_the_parent_times(tmp_path: Path) -> None:
    """A fork's copy of its parent's history (re-dated) merges with the parent's own turns."""
    parent = write(rollout(tmp_path, SID), SESSION)
    copied = [dict(line, timestamp=_at(500)) for line in SESSION]  # re-dated to the fork
    fork = write(rollout(tmp_path, FORK), [
        meta(FORK, 500, forked_from_id=SID), *copied,
        context("gpt-5.6-sol", 510, turn_id="019f5c39-9999-7000-8000-000000000000"),
        count(520, (5000, 2200, 100, 15), (2000, 1000, 20, 5))])
    parsed = parse(tmp_path, (parent, None), (fork, None)).parsed
    turns = sorted(parsed.requests.values(), key=lambda r: r.ts)
    assert [(r.session, r.model, r.input, r.output) for r in turns] == [
        (SID, "gpt-5.5", 800, 50), (SID, "gpt-5.5", 1000, 30), (FORK, "gpt-5.6-sol", 1000, 20)]
    assert turns[0].ts < turns[2].ts - 400  # the parent's own time, not the copy's


def test_a_turn_without_a_model_is_priced_as_the_fallback_and_counted(tmp_path: Path) -> None:
    """A session that never names its model gets the assumed fallback, counted as mended."""
    path = write(rollout(tmp_path, SID), [meta(SID), count(10, (10, 0, 5, 0), (10, 0, 5, 0))])
    parsed = parse(tmp_path, (path, None)).parsed
    assert [r.model for r in parsed.requests.values()] == [codex.FALLBACK_MODEL]
    assert parsed.counts.mended[MendKind.MODEL_ASSUMED] == 1


def test_a_session_without_meta_takes_the_id_in_its_name(tmp_path: Path) -> None:
    """No session_meta line: the session id comes from the file name."""
    path = write(rollout(tmp_path, SID), [context("gpt-5.5", 1),
                                           count(10, (10, 0, 5, 0), None)])
    parsed = parse(tmp_path, (path, None)).parsed
    assert [(r.session, r.input) for r in parsed.requests.values()] == [(SID, 10)]


def test_totals_that_go_back_start_new_keys(tmp_path: Path) -> None:
    """Totals that restart (a reset) never reuse a key of the turns before."""
    path = write(rollout(tmp_path, SID), [
        meta(SID), context("gpt-5.5", 1), count(10, (100, 0, 10, 0), None),
        count(20, (50, 0, 5, 0), None), count(30, (100, 0, 10, 0), None)])
    parsed = parse(tmp_path, (path, None)).parsed
    assert sorted(r.input for r in parsed.requests.values()) == [50, 50, 100]


def test_bad_lines_are_counted_rejections(tmp_path: Path) -> None:
    """Negative counts, broken JSON and bad times are rejected by reason; nothing stops."""
    path = write(rollout(tmp_path, SID), [
        meta(SID), context("gpt-5.5", 1),
        count(10, (-1, 0, 10, 0), None),
        b'{"type":"event_msg","payload":{"type":"token_count","info":{',
        dict(count(20, (10, 0, 1, 0), None), timestamp="yesterday"),
        dict(count(20, (10, 0, 1, 0), None), timestamp="9999-01-01T00:00:00Z"),
        count(30, (20, 0, 2, 0), None)])
    parsed = parse(tmp_path, (path, None)).parsed
    assert dict(parsed.counts.rejected) == {RejectReason.NEGATIVE_TOKENS: 1,
                                            RejectReason.INVALID_JSON: 1,
                                            RejectReason.BAD_TIMESTAMP: 2}
    assert [r.input for r in parsed.requests.values()] == [20]


def test_a_turn_ahead_of_our_clock_waits_for_it(tmp_path: Path) -> None:
    """A turn two days ahead of our clock is left for a later pass, not rejected."""
    path = write(rollout(tmp_path, SID), SESSION)
    behind = 1_783_958_400 - 2 * 86_400.0  # our clock two days behind the lines
    early = parse(tmp_path, (path, None), now=behind)
    assert early.ahead == [(str(path), 1)] and not early.parsed.requests
    assert not early.parsed.counts.rejected
    later = parse(tmp_path, (path, early.checkpoints[0]))
    assert len(later.parsed.requests) == 2


def settings(tier: str, t: float, model: str = "gpt-5.5") -> dict[str, Any]:
    """A ``thread_settings_applied`` event (how Codex states a session's service tier)."""
    return {"timestamp": _at(t), "type": "event_msg",
            "payload": {"type": "thread_settings_applied",
                        "thread_settings": {"model": model, "service_tier": tier}}}


def test_a_priority_tier_stated_by_the_session_is_the_turns_tier(tmp_path: Path) -> None:
    """Turns after ``service_tier: priority`` carry it (priced at the tier); "default" is none."""
    path = write(rollout(tmp_path, SID), [
        meta(SID), settings("default", 0.5), context("gpt-5.5", 1),
        count(10, (100, 0, 10, 0), None), settings("priority", 20),
        count(30, (300, 0, 20, 0), None)])
    head = parse(tmp_path, (path, None))
    turns = sorted(head.parsed.requests.values(), key=lambda r: r.ts)
    assert [r.service_tier for r in turns] == ["", "priority"]


def test_a_file_rewritten_in_place_is_read_again_from_a_fresh_state(tmp_path: Path) -> None:
    """A rewrite of the same length is read again from byte 0, its state not carried over."""
    path = write(rollout(tmp_path, SID), SESSION)
    first = parse(tmp_path, (path, None))
    other = [meta(SID), context("gpt-5.4", 1), count(10, (1000, 200, 50, 10), (1000, 200, 50, 10))]
    body = b"".join(json.dumps(x).encode() + b"\n" for x in other)
    size = path.stat().st_size
    path.write_bytes(body + b" " * (size - len(body) - 1) + b"\n")  # same length, other turns
    again = parse(tmp_path, (path, first.checkpoints[0]))
    assert again.rereads and [r.model for r in again.parsed.requests.values()] == ["gpt-5.4"]


def test_the_agent_name_is_one_name() -> None:
    """The seam names Codex as its parser does (the seam imports the parser only when used)."""
    from exporter.ingest import formats
    from exporter.records import CODEX_KEY_PREFIX

    assert formats.CODEX == codex.AGENT and codex.KEY_PREFIX == CODEX_KEY_PREFIX
    assert formats.FORMATS[formats.CODEX].agent == codex.AGENT
