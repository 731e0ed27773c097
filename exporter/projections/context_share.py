"""The prompt's share of the model's context window, where the log states the window.

Codex writes its model's window with each turn (``model_context_window``,
kept as ``requests.context_window``); Claude Code's transcripts state none
(0). The share of a turn is its prompt (the request's context: uncached input
plus cache reads, Codex having no cache writes) over that window: how full the
window was when the model read it. A share above 1 is a prompt past the stated
window (real logs have them: the stated window is not a hard limit), shown as
it is.

:func:`of_selection` gives the exact nearest-rank p50 and p90 and the max over
the selection's requests that state a window (:func:`~exporter.projections.
percentiles.kth`: no row reaches Python), or None when none does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from exporter.projections.percentiles import kth
from exporter.projections.selection import Selection

STATED: Final = "context_window > 0"  # requests whose log states the window


@dataclass(frozen=True, slots=True)
class ContextShare:
    """p50, p90 and max of prompt / window over ``turns`` requests that state a window."""

    p50: float
    p90: float
    max: float
    turns: int

    def to_json(self) -> dict[str, Any]:
        """``{p50, p90, max, turns}``, shares rounded to 1e-6."""
        return {"p50": round(self.p50, 6), "p90": round(self.p90, 6),
                "max": round(self.max, 6), "turns": self.turns}


def share_sql(selection: Selection) -> str:
    """A request's prompt over its stated window, as SQL (for the rows :data:`STATED` keeps)."""
    return f"(CAST({selection.context} AS REAL) / context_window)"


def of_selection(selection: Selection) -> ContextShare | None:
    """The share's p50, p90 and max over the selection's requests with a stated window."""
    expr = share_sql(selection)
    n, top = selection.rows(f"count(*), max({expr})", STATED)[0]
    if not n:
        return None
    return ContextShare(float(kth(selection, expr, STATED, p=50, n=n)),
                        float(kth(selection, expr, STATED, p=90, n=n)), float(top), int(n))
