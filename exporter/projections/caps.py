"""How many rows each surface for people shows; the rest summed into one "other" row.

Model ids, projects and sessions are strings from transcripts: their number
has no bound but the ledger's. A table or chart a person reads, and the page's
JSON fetched over the network, show the costliest rows and one row
``other (K more)`` summing the rest, so every list still adds up to its total.
``report --json`` and ``--csv`` are for programs and list every row
(docs/figures.md, "Caps").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from exporter.projections.figures import Summary
from exporter.projections.usage import ZERO, Usage
from exporter.shown import clip

SUMMARY_MODELS: Final = 20  # report (text): rows of the "By model" table
UNPRICED_LINES: Final = 10  # report (text): "unpriced:" lines under the tables
BREAKDOWN_MODELS: Final = 10  # report views (text, --breakdown): model rows in one row
MODEL_NAMES: Final = 6  # report views (text): names in one row's "models" cell
#: Report views (text) without --limit: those whose rows are names from transcripts.
VIEW_ROWS: Final = {name: 200 for name in ("session", "project", "skill", "plugin", "mcp", "agent")}
PERIOD_ROWS: Final = 1000  # the other views (days, weeks, months, blocks): bounded by time
API_ROWS: Final = 50  # /api/summary.json: entries of by_model and of by_project_cost_usd


def view_rows(view: str) -> int:
    """The rows a text view shows when ``--limit`` is not given."""
    return VIEW_ROWS.get(view, PERIOD_ROWS)


def other_label(more: int) -> str:
    """The label of the row that sums ``more`` rows left out: ``other (19,980 more)``."""
    return f"other ({more:,} more)"


@dataclass(frozen=True, slots=True)
class Capped:
    """The rows shown, and the sum and count of the rows left out (``more`` 0: none)."""

    shown: tuple[tuple[str, Usage], ...]
    rest: Usage = ZERO
    more: int = 0


def costliest(groups: Mapping[str, Usage], n: int) -> Capped:
    """At most ``n`` groups: all in their order if they fit, else the ``n`` costliest first.

    Costliest: most cost, then most unpriced tokens, most requests, then by name,
    so unpriced models (no cost) still rank by use.
    """
    if len(groups) <= n:
        return Capped(tuple(groups.items()))
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1].cost_pico, -kv[1].unpriced,
                                                     -kv[1].requests, kv[0]))
    return Capped(tuple(ranked[:n]), sum((u for _, u in ranked[n:]), ZERO), len(ranked) - n)


def summary_json(summary: Summary, n: int = API_ROWS) -> dict[str, Any]:
    """``summary.to_json()`` with the ``n`` costliest models; ``by_model_other`` sums the rest.

    ``by_model_other`` (``{"models": K, T…}``) is there only when models were left out.
    """
    models = costliest(summary.by_model, n)
    doc = dataclasses.replace(summary, by_model=dict(models.shown)).to_json()
    if models.more:
        doc["by_model_other"] = {"models": models.more, **models.rest.totals()}
    return doc


def other_cost(rest: Sequence[tuple[str, float]], what: str) -> dict[str, Any]:
    """The rows left out of a list of (name, USD): ``{what: K, "cost_usd": their sum}``."""
    return {what: len(rest), "cost_usd": round(sum(c for _, c in rest), 6)}


def chart_rows(rows: Sequence[tuple[str, float]], n: int) -> list[tuple[str, float]]:
    """A chart's bars: the first ``n`` rows, or ``n - 1`` and one ``other (K more)`` bar.

    The names are transcript data: cut and their control characters shown here
    (:func:`exporter.shown.clip`), escaped as HTML where they are written.
    """
    shown = [(clip(name), value) for name, value in rows[:n]]
    if len(rows) <= n:
        return shown
    return [*shown[: n - 1], (other_label(len(rows) - n + 1), sum(v for _, v in rows[n - 1:]))]
