"""Generated Codex homes read back: `report --json` figures and ledger sums beside the truth.

Shared by the tests of the Codex generator (test_codex_synth, test_codex_kill):
the report's summary and daily view in the truth's shape, the ledger's
per-model sums (reasoning is kept there, not in the report), and a file
grown piece by piece as Codex appends to a live thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from exporter.cli.commands import main
from exporter.sqlite import sqlite3

TOKENS = ("requests", "input_tokens", "cache_read_tokens", "output_tokens",
          "cache_write_5m_tokens", "cache_write_1h_tokens")
"""The figures of a truth's T that the report prints (reasoning: the ledger's)."""


def report(home: Path, state: Path, capsys: pytest.CaptureFixture[str], *extra: str,
           environ: Mapping[str, str] | None = None) -> Any:
    """`report --json` over one Codex home (given as a data dir unless ``extra`` says)."""
    given = list(extra) if "--codex-home" in extra else ["--data-dir", str(home), *extra]
    assert main(["report", "--json", "--state-dir", str(state), "--timezone", "UTC", *given],
                environ) == 0
    return json.loads(capsys.readouterr().out)


def figures(home: Path, state: Path, capsys: pytest.CaptureFixture[str],
            *extra: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The report's figures in the truth's shape: totals, by model, by UTC day, sessions, lines."""
    summary = report(home, state, capsys, *extra, environ=environ)
    daily = report(home, state, capsys, "daily", *extra, environ=environ)
    return {
        "totals": pick(summary["totals"]),
        "by_model": {m: pick(t) for m, t in summary["by_model"].items()},
        "by_day": {row["period"]: pick(row) for row in daily["rows"]},
        "sessions": summary["sessions"],
        "lines": summary["lines"],
        "cost": cost_of(summary),
    }


def expected(truth: Mapping[str, Any]) -> dict[str, Any]:
    """The truth's figures that :func:`figures` reads."""
    return {
        "totals": pick(truth["totals"]),
        "by_model": {m: pick(t) for m, t in truth["by_model"].items()},
        "by_day": {d: pick(t) for d, t in truth["by_day"].items()},
        "sessions": truth["sessions"],
        "lines": truth["lines"],
        "cost": cost_of(truth),
    }


def cost_of(t: Mapping[str, Any]) -> dict[str, float]:
    """The cost in total and per model, to 1e-4 USD (the truth sums genai-prices' floats)."""
    return {"": round(t["totals"]["cost_usd"], 4),
            **{m: round(v["cost_usd"], 4) for m, v in t["by_model"].items()}}


def pick(t: Mapping[str, Any]) -> dict[str, int]:
    """The token figures of one T (or report row)."""
    return {k: int(t[k]) for k in TOKENS}


def ledger_sums(ledger: Path) -> dict[str, dict[str, int]]:
    """Per model (and "" for all): requests and token sums straight from ``requests``."""
    con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT model, count(*), sum(input), sum(cache_read), sum(output), "
                           "sum(reasoning) FROM requests GROUP BY model").fetchall()
    finally:
        con.close()
    out: dict[str, dict[str, int]] = {}
    for model, *sums in rows:
        out[model] = dict(zip(("requests", "input_tokens", "cache_read_tokens",
                               "output_tokens", "reasoning_tokens"), sums, strict=True))
    out[""] = {k: sum(v[k] for v in out.values()) for k in
               ("requests", "input_tokens", "cache_read_tokens", "output_tokens",
                "reasoning_tokens")}
    return out


def truth_sums(truth: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """The truth in :func:`ledger_sums`' shape."""
    keys = ("requests", "input_tokens", "cache_read_tokens", "output_tokens", "reasoning_tokens")
    out = {m: {k: t[k] for k in keys} for m, t in truth["by_model"].items()}
    out[""] = {k: truth["totals"][k] for k in keys}
    return out


def rollout_files(home: Path) -> list[Path]:
    """Every rollout file of a home, in name order."""
    return sorted(home.rglob("rollout-*.jsonl"))


def lines_of(path: Path) -> list[dict[str, Any]]:
    """A rollout file's complete lines, decoded (a snapshot may end in part of one)."""
    return [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]]


def pieces(data: bytes, cuts: Sequence[int]) -> Iterator[bytes]:
    """``data`` cut at ``cuts`` (byte offsets, anywhere: mid-line too), in order."""
    at = 0
    for cut in [*sorted(cuts), len(data)]:
        yield data[at:cut]
        at = cut
