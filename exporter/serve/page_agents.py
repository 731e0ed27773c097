"""The page's agent panel: each agent's figures side by side, and links that filter by agent.

Shown where the roots hold another agent's logs than Claude Code's (Codex).
The links set the ``agent`` parameter (:mod:`exporter.serve.page_range`),
which scopes every other card as ``report --agent`` does; the panel itself
always shows every agent over the page's range. What an agent does not log is
said ("not measured"), never drawn as a zero.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Final

from exporter.projections.agents import name
from exporter.projections.usage import AgentUsage
from exporter.serve.page_figures import PageData

NOT_MEASURED: Final = "not measured"
_ROWS: Final[tuple[tuple[str, str, Callable[[AgentUsage], int | None]], ...]] = (
    ("requests", "requests", lambda a: a.usage.requests),
    ("input (uncached)", "input", lambda a: a.usage.input),
    ("cache read", "cache-read", lambda a: a.usage.cache_read),
    ("cache write", "cache-write",
     lambda a: a.usage.cache_write if a.cache_writes_measured else None),
    ("output (reasoning included)", "output", lambda a: a.usage.output),
    ("of it reasoning", "reasoning", lambda a: a.reasoning),
)


def title(data: PageData) -> str:
    """The page's heading: whose usage it shows."""
    if data.query.agent is not None:
        return f"{name(data.query.agent)} usage"
    if data.agents:
        return " and ".join(name(a) for a in data.agents) + " usage"
    return "Claude Code usage"


def links(data: PageData) -> str:
    """``All · Claude Code · Codex``: the same page for one agent (the current one marked)."""
    out = []
    for agent, label in ((None, "All"), *((a, name(a)) for a in data.agents)):
        mark = ' aria-current="page" class="on"' if agent == data.query.agent else ""
        href = data.query.query(agent=agent)
        out.append(f'<a data-agent="{escape(agent or "all")}" href="{escape(href)}"{mark}>'
                   f"{escape(label)}</a>")
    return '<p data-filter="agent">Show: ' + " · ".join(out) + "</p>"


def panel(data: PageData, money: Callable[[float], str]) -> str:
    """The card: a column per agent (requests, tokens by kind, cost), then the filter links."""
    items = list(data.agents.items())
    head = "".join(f"<th>{escape(name(a))}</th>" for a, _ in items)
    rows = []
    for label, key, value in _ROWS:
        cells = []
        for agent, usage in items:
            v = value(usage)
            shown = ("—" if key == "reasoning" else NOT_MEASURED) if v is None else f"{v:,}"
            cells.append(f'<td><span data-figure="{escape(agent)}-{key}">{escape(shown)}'
                         "</span></td>")
        rows.append(f"<tr><td>{escape(label)}</td>{''.join(cells)}</tr>")
    costs = "".join(f'<td><span data-figure="{escape(a)}-cost">{escape(_cost(u, money))}'
                    "</span></td>" for a, u in items)
    rows.append(f"<tr><td>cost (list prices)</td>{costs}</tr>")
    note = ('<p class="note">Codex logs no cache writes (not measured); its output includes '
            "reasoning, also shown on its own.</p>")
    return (f'<section class="wide" data-section="agents"><h2>By agent</h2>{links(data)}'
            f'<table data-table="agents"><tr><th></th>{head}</tr>{"".join(rows)}</table>'
            f"{note}</section>")


def _cost(a: AgentUsage, money: Callable[[float], str]) -> str:
    """An agent's cost; ``n/a`` where none of its tokens has a price (not $0)."""
    return "n/a" if a.usage.cost_pico == 0 and a.usage.unpriced else money(a.usage.cost_usd)

