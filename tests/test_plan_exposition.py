"""The plan families in the exposition, assembled as ``serve`` does it, pinned by a golden file.

A fixed ledger (fourteen $5 requests) and the status-line refreshes that followed
them are recorded through the real status-line command, moved into the ledger by
the daemon's own :class:`PlanLink` (``PlanLink.on_projection``, the daemon's code
path) and scraped from the projection's registry at a fixed clock. Only the plan
families' lines go into tests/golden/exposition_plan.txt (the rest is pinned by
tests/golden/exposition.txt); UPDATE_GOLDEN=1 rewrites it.
"""

from __future__ import annotations

import functools
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.cli import statusline
from exporter.ingest import spool
from exporter.ledger import plan_store as store
from exporter.ledger.store import Ledger
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.plan.gauges import PLAN_FAMILIES
from exporter.projections.pricing import RateTable
from exporter.records import Request, Source
from exporter.serve.plan_link import PlanLink
from tests.support.exposition import families
from tests.support.plan import FIVE_HOURS, T0, record, refreshes, store_requests

GOLDEN = Path(__file__).parent / "golden" / "exposition_plan.txt"
SESSION = "6f1c0c4e-8a8b-4b7e-9d55-0a3e6f0a1b2c"
SECOND_START = T0 + 6 * 3600  # the second 5-hour window opens an hour after the first reset
NOW = SECOND_START + 3600  # the scrape: inside the second 5-hour window
USD_5H, USD_7D = 0.5, 5.0  # the window sizes the refreshes follow: $ per 1 %
PLAN_NAMES = frozenset(fam.exposed() for fam in PLAN_FAMILIES)


def requests() -> list[Request]:
    """Ten requests 10 minutes apart, then four after the first 5-hour window reset: $5 each."""
    times = [T0 + 600 * i for i in range(10)] + [SECOND_START + 600 * i for i in range(4)]
    return [Request(f"r{i}", t, "claude-opus-4-6", SESSION, "/home/dev/app", Source.MAIN,
                    1_000_000, 0, 0, 0, 0) for i, t in enumerate(times)]


@dataclass(frozen=True)
class Scrape:
    """One scrape of the assembled exposition, with and without the plan link."""

    text: str  # the projection's registry with the plan families registered on its meter
    plain: str  # the same ledger and clock without the plan link (what the plan link adds to)
    last_context: float  # the last refresh's context fill, percent


def run_statusline(state: Path, stdin: bytes, at: float) -> None:
    """One status-line refresh (bad input included) at ``at``: it still prints a line."""
    out = io.BytesIO()
    code = statusline.main([], io.BytesIO(stdin), out, {spool.STATE_DIR_ENV: str(state)},
                           clock=functools.partial(float, at))
    assert code == 0 and out.getvalue().strip()


def record_history(state: Path, pricing: RateTable) -> float:
    """Every refresh (one repeated, two failed) and a torn spool line; the last context %."""
    found = refreshes(requests(), pricing, usd_5h=USD_5H, usd_7d=USD_7D)
    record(state, found)
    record(state, found[-1:])  # the same figures refreshed again: one sample, not two
    run_statusline(state, b"", SECOND_START + 2000)
    run_statusline(state, b'{"session_id": "6f1c', SECOND_START + 2001)
    with (state / spool.SPOOL_NAME).open("ab") as fh:
        fh.write(b"\x00torn line after a full disk\n")
    return float(found[-1][1]["context_window"]["used_percentage"])


def options() -> MetricsOptions:
    """The projection's options (a fixed version for the build-info series)."""
    return MetricsOptions(budgets={"day": 20.0}, version="test")


def projection(pricing: RateTable, ledger: Ledger) -> tuple[Projection, CollectorRegistry]:
    """A projection loaded from ``ledger`` at the fixed clock, on a fresh registry."""
    registry = CollectorRegistry()
    proj = Projection(pricing, options(), registry, clock=lambda: NOW, files_watched=lambda: 1)
    proj.load(ledger)
    return proj, registry


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    """The fixed ledger and samples, scraped as serve exposes them, at ``NOW``."""
    state = tmp_path_factory.mktemp("state")
    pricing = RateTable.load()
    ledger = Ledger(state / "ledger.sqlite3", rules=options().counting(pricing),
                    clock=lambda: NOW)
    store_requests(ledger, requests())
    ledger.settle(force=True)
    context = record_history(state, pricing)
    proj, registry = projection(pricing, ledger)
    link = PlanLink.on_projection(proj, state / "ledger.sqlite3", state, pricing,
                                  clock=lambda: NOW, monotonic=lambda: 0.0)
    bare, bare_registry = projection(pricing, ledger)
    try:
        link.tick()  # what serve does at start: the spool into the ledger
        link.after_pass()
        yield Scrape(generate_latest(registry).decode(),
                     generate_latest(bare_registry).decode(), context)
    finally:
        link.close()
        proj.inst.shutdown()
        bare.inst.shutdown()
        ledger.close()


def blocks(text: str) -> dict[str, str]:
    """The exposition's families as text blocks (HELP, TYPE, samples), by exposed name."""
    out: dict[str, str] = {}
    name = ""
    for line in text.splitlines(keepends=True):
        m = re.match(r"# HELP (\S+) ", line)
        if m:
            name = m.group(1)
        out[name] = out.get(name, "") + line
    return out


def plan_text(text: str) -> str:
    """The plan families' lines of an exposition, in exposition order."""
    return "".join(block for name, block in blocks(text).items() if name in PLAN_NAMES)


def test_golden_plan_exposition(scrape: Scrape) -> None:
    """The plan families' lines equal the golden file (UPDATE_GOLDEN=1 rewrites it)."""
    text = plan_text(scrape.text)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_every_plan_family_is_exposed_once(scrape: Scrape) -> None:
    """Each plan family shows up exactly once, with its HELP text and type."""
    found = blocks(scrape.text)
    assert set(found) >= PLAN_NAMES
    for fam in PLAN_FAMILIES:
        block = found[fam.exposed()]
        assert block.startswith(f"# HELP {fam.exposed()} {fam.help}\n"), fam.name
        assert f"# TYPE {fam.exposed()} {fam.kind}\n" in block, fam.name
        assert scrape.text.count(f"# TYPE {fam.exposed()} ") == 1, fam.name


def test_the_plan_link_only_adds_its_families(scrape: Scrape) -> None:
    """Without the plan families the exposition is byte for byte the one of a bare projection."""
    rest = "".join(block for name, block in blocks(scrape.text).items()
                   if name not in PLAN_NAMES)
    assert rest == scrape.plain
    assert not PLAN_NAMES & set(blocks(scrape.plain))


def test_plan_figures_follow_the_fixed_samples(scrape: Scrape) -> None:
    """Values a reader can check by hand: windows, resets, exhaustion, age, estimate, counters."""
    fams = families(scrape.text)

    def value(name: str, **labels: str) -> float:
        fam = fams[name.removesuffix("_total")]
        got = [s.value for s in fam.samples if s.name == name and s.labels == labels]
        assert len(got) == 1, (name, labels, fam.samples)
        return float(got[0])

    five, seven = {"window": "five_hour"}, {"window": "seven_day"}
    assert value("claude_code_plan_window_used_ratio", **five) == 0.4  # 4 x $5 at $0.50 per 1 %
    assert value("claude_code_plan_window_used_ratio", **seven) == 0.14  # 14 x $5 at $5 per 1 %
    assert value("claude_code_plan_window_resets_at_seconds", **five) == SECOND_START + FIVE_HOURS
    assert value("claude_code_plan_window_resets_at_seconds", **seven) == T0 + 7 * 86_400
    assert value("claude_code_plan_windows_exhausted_total", **five) == 1  # the first reached 100
    assert value("claude_code_plan_windows_exhausted_total", **seven) == 0
    assert value("claude_code_plan_window_samples_total") == 14  # the repeat is not a sample
    assert value("claude_code_plan_sample_age_seconds") == NOW - (SECOND_START + 1800.5)
    assert value("claude_code_context_window_used_ratio") == scrape.last_context / 100
    assert value("claude_code_plan_window_usd_per_percent", **five) == pytest.approx(USD_5H)
    assert value("claude_code_plan_window_usd_per_percent", **seven) == pytest.approx(USD_7D)
    assert value("claude_code_plan_window_usd_per_percent_pairs", **five) == 8 + 2
    assert value("claude_code_plan_window_usd_per_percent_pairs", **seven) == 12
    # Pace (the blend): 40 % in the hour, 10 % in the last 30 minutes -> 0.25 x 20 + 0.75 x 40.
    assert value("claude_code_plan_window_projected_ratio", **five) == pytest.approx(1.8)
    assert value("claude_code_plan_window_limit_at_seconds", **five) == pytest.approx(
        NOW + 60 / 35 * 3600)
    # The week opened 7 hours ago, under 5 % of it: not enough data, no projection at all.
    for name in ("claude_code_plan_window_projected_ratio",
                 "claude_code_plan_window_limit_at_seconds"):
        assert [s for s in fams[name].samples if s.labels == seven] == []
    for reason in spool.FAILURE_REASONS:
        want = 1 if reason in ("empty", "not_json") else 0
        assert value("claude_code_exporter_statusline_failures_total", reason=reason) == want
    for reason in store.REJECT_REASONS:
        want = 1 if reason == "not_json" else 0
        assert value("claude_code_exporter_plan_spool_rejected_lines_total",
                     reason=reason) == want


def test_no_plan_family_carries_a_session_id(scrape: Scrape) -> None:
    """The payload's session_id is nowhere in the exposition: no label name, no label value."""
    fams = families(scrape.text)
    exposed = {f.name + ("_total" if f.type == "counter" else "") for f in fams.values()}
    assert exposed >= PLAN_NAMES
    for fam in fams.values():
        for s in fam.samples:
            assert not any("session" in label.lower() for label in s.labels), s
            assert SESSION not in s.labels.values(), s
    for fam in PLAN_FAMILIES:
        assert not any("session" in label for label in fam.labels), fam.name
    assert SESSION not in scrape.text and SESSION[:8] not in scrape.text


def test_docs_dashboards_and_rules_name_only_exposed_plan_families() -> None:
    """Every plan family named in the docs, README, dashboards or rules is one serve exposes."""
    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"claude_code_(?:plan|context_window|exporter_statusline|"
                         r"exporter_plan)[a-z0-9_]*")
    named: dict[str, set[str]] = {}
    sources = [root / "README.md", *[p for top in ("docs", "grafana", "deploy")
                                      for p in (root / top).rglob("*") if p.is_file()]]
    for path in sources:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # images
        for name in pattern.findall(text):
            named.setdefault(name, set()).add(str(path.relative_to(root)))
    assert named, "no plan family named anywhere"
    assert set(named) <= PLAN_NAMES, {n: named[n] for n in set(named) - PLAN_NAMES}
