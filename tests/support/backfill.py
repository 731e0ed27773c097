"""Backfill text of requests, parsed back into series, and serve's start-up samples to match."""

from __future__ import annotations

import io
import re
from collections import defaultdict
from typing import Any

from exporter.ledger.store import Ledger
from exporter.projections.backfill import BackfillOptions, serve_samples, write_history
from exporter.projections.metrics import MetricsOptions
from exporter.projections.pricing import RateTable
from exporter.records import Request

# one sample line of the OpenMetrics text: name, labels, value, timestamp
LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+) (\d+)")
# the target labels the test backfills carry
TARGET = {"job": "claude-code", "instance": "ws-1:9477"}


def history(requests: list[Request], **opts: Any) -> str:
    """The backfill text of ``requests`` with test target labels."""
    out = io.StringIO()
    options = BackfillOptions(labels=TARGET, **opts)
    write_history(requests, RateTable.load(), MetricsOptions(), out, options,
                  now=requests[-1].ts + 2 * 3600)
    return out.getvalue()


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, str], list[tuple[int, float]]]]:
    """Family types and every series' (timestamp, value) points, checking the layout."""
    lines = text.splitlines()
    assert lines[-1] == "# EOF"
    types: dict[str, str] = {}
    points: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    family = ""
    for line in lines[:-1]:
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ")
            assert family not in types, f"{family} declared twice"
            types[family] = kind
            continue
        if line.startswith("#"):
            continue
        m = LINE.fullmatch(line)
        assert m, line
        name, labels, value, ts = m.groups()
        suffixes = {"counter": ("_total",), "gauge": ("",)}.get(
            types[family], ("_bucket", "_count", "_sum"))
        assert name in {family + s for s in suffixes}, f"{name} outside family {family}"
        points[(name, labels or "")].append((int(ts), float(value)))
    return types, points


def labels_of(text: str) -> dict[str, str]:
    """``{a="x",b="y"}`` → dict (test values have no escapes)."""
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


def startup(ledger: Ledger) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Counter and histogram samples serve exposes on start-up over ``ledger``."""
    return serve_samples(ledger, RateTable.load(), MetricsOptions())


def at(points: dict[tuple[str, str], list[tuple[int, float]]], ts: int) -> dict[Any, float]:
    """The value of every series at ``ts`` (series without a point there are left out)."""
    out = {}
    for (name, labels), series in points.items():
        for t, v in series:
            if t == ts:
                lab = {k: v2 for k, v2 in labels_of(labels).items() if k not in TARGET}
                out[(name, tuple(sorted(lab.items())))] = v
    return out
