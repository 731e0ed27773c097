"""docs/metrics.md, the catalogue, names the families and buckets the golden expositions pin."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
#: Families that appear only once their event happened (no golden ledger has one).
CONDITIONAL = {"claude_code_web_search_requests_total",
               # only while OTLP pushes (tests/test_otlp_failures.py scrapes them)
               "claude_code_exporter_otlp_pushes_total",
               "claude_code_exporter_otlp_push_failures_total",
               # only once Codex logged its plan windows (tests/test_codex_limits.py scrapes them)
               *(f"claude_code_codex_plan_{n}" for n in (
                   "window_used_ratio", "window_resets_at_seconds", "window_samples_total",
                   "windows_exhausted_total", "sample_age_seconds", "rejected_readings_total",
                   "window_projected_ratio", "window_limit_at_seconds"))}


def golden_families() -> dict[str, str]:
    """Family name (counters with ``_total``) → type, over the default and plan goldens."""
    out = {}
    for name in ("exposition.txt", "exposition_plan.txt", "exposition_codex.txt"):
        for m in re.finditer(r"^# TYPE (\S+) (\S+)$", (GOLDEN / name).read_text(), re.M):
            family, kind = m.groups()
            out[family + ("_total" if kind == "counter" and not family.endswith("_total")
                          else "")] = kind
    return out


def catalogue_rows() -> dict[str, str]:
    """The first-column name of every table row of docs/metrics.md → the row."""
    rows = {}
    for line in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        m = re.match(r"^\| `(claude_code_[a-z0-9_]+)` \|", line)
        if m:
            rows[m.group(1)] = line
    return rows


def test_catalogue_names_every_exposed_family_and_no_other() -> None:
    """Each family of the goldens has a row, and each row is a family (or a conditional one)."""
    exposed, documented = set(golden_families()), set(catalogue_rows())
    assert exposed - documented == set()
    assert documented - exposed == CONDITIONAL


def test_catalogue_buckets_are_the_exposed_ones() -> None:
    """A histogram's row lists exactly the ``le`` bounds of the golden exposition."""
    text = (GOLDEN / "exposition.txt").read_text() + (GOLDEN / "exposition_codex.txt").read_text()
    rows = catalogue_rows()
    for family, kind in golden_families().items():
        if kind != "histogram":
            continue
        bounds = {float(b) for b in re.findall(rf'^{family}_bucket{{[^}}]*le="([^"+]+)"',
                                                text, re.M)}
        cells = rows[family].split("|")[3].split()
        assert {float(c) for c in cells} == bounds, family
