"""Whose logs a report covers: the agent dimension of `report`, its views and the page.

A request's agent is that of the transcript roots it was read under
(``roots.agent``, exporter.ingest.formats). :func:`scopes` turns a report's
roots into one scope per agent whose roots hold a request: a ledger holding
one agent has one, and every output stays as it was; a ledger holding both
gets a per-agent line in the summary (:func:`by_agent`), an ``agent`` on the
views' rows (:func:`split_view`), and a panel on the page.

What an agent does not record is said, never shown as a measured zero: Codex
writes no cache (``cache_writes_measured: false``), reports reasoning
tokens on their own (part of its output, summed apart here) and states its
model's context window (the prompt's share of it: :mod:`context_share`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from exporter.ingest.formats import AGENT_NAMES, AGENTS, CLAUDE, CODEX
from exporter.ledger.scopes import absolute, inside
from exporter.projections.class_prices import ClassPrices
from exporter.projections.facts import Facts
from exporter.projections.selection import Selection
from exporter.projections.usage import ZERO, AgentUsage
from exporter.records import ALL_ROOTS

MEASURES_CACHE_WRITES: Final = frozenset({CLAUDE})  # agents whose logs say what they wrote
REPORTS_REASONING: Final = frozenset({CODEX})  # agents whose logs give reasoning tokens apart
STATES_CONTEXT_WINDOW: Final = frozenset({CODEX})  # agents whose logs state the model's window


class Scoping(Protocol):
    """What a ledger tells about its roots (``exporter.ledger.store.Ledger`` is one)."""

    def root_agents(self) -> dict[str, str]:
        """Every root the ledger knows, with its agent."""

    def mask(self, roots: Sequence[str | Path] | None) -> int | None:
        """The ``requests.roots`` bits of the roots at or below ``roots``."""

    def scope(self, roots: Sequence[str | Path] | None) -> str:
        """A relation of the requests in the scope of ``roots``."""

    def scope_filter(self, roots: Sequence[str | Path] | None, column: str = "roots") -> str | None:
        """An SQL condition on a roots bitmask column: in scope of ``roots``."""


def name(agent: str) -> str:
    """What people call an agent: ``Claude Code``, ``Codex`` (its id if unknown)."""
    return AGENT_NAMES.get(agent, agent)


def roots_of(known: Mapping[str, str], dirs: Sequence[str | Path], agent: str) -> list[str]:
    """The roots (of ``known``: path → agent) at or below ``dirs`` whose logs are ``agent``'s."""
    wanted = absolute(dirs)
    return sorted(p for p, a in known.items() if a == agent and inside(p, wanted))


@dataclass(frozen=True, slots=True)
class Scope:
    """One agent's part of a report's roots: the roots, their requests, their slot filter."""

    agent: str
    roots: tuple[str, ...]
    relation: str
    slot_scope: str | None

    def of(self, base: Selection) -> Selection:
        """``base`` (range, filters, grouping) over this agent's requests only."""
        return dataclasses.replace(base, relation=self.relation, slot_scope=self.slot_scope)


def scope(ledger: Scoping, dirs: Sequence[str | Path], agent: str) -> Scope:
    """The requests of ``agent``'s roots at or below ``dirs``.

    Claude Code's scope is the ledger's own (``Ledger.scope``), so a Claude
    report reads exactly what it read before there was a second agent. Other
    agents' scopes leave out the requests of a v1 ledger (recorded before roots
    were, hence in every scope): those were all Claude Code's.
    """
    roots = roots_of(ledger.root_agents(), dirs, agent)
    if agent == CLAUDE:
        return Scope(agent, tuple(roots), ledger.scope(roots), ledger.scope_filter(roots))
    bits = ledger.mask(roots) or 0
    cond = f"(roots & {bits}) != 0 AND roots != {ALL_ROOTS}" if bits else "0"
    return Scope(agent, tuple(roots), f"(SELECT * FROM requests WHERE {cond})", cond)


def scopes(ledger: Scoping, dirs: Sequence[str | Path], base: Selection) -> dict[str, Scope]:
    """The scope of each agent (in :data:`AGENTS` order) whose roots hold a request at all.

    Range and filters aside: an agent with requests elsewhere in time still
    has its (empty) line, so a report's shape does not change with its range.
    """
    out = {}
    for agent in AGENTS:
        found = scope(ledger, dirs, agent)
        if found.roots and base.read(f"SELECT 1 FROM {found.relation} LIMIT 1", []):
            out[agent] = found
    return out


def usage_of(selection: Selection, prices: ClassPrices, agent: str) -> AgentUsage:
    """The selection's usage summed (one agent's scope), with its reasoning where reported."""
    total = ZERO
    for fact in Facts(selection, prices, by_class=True).collect():
        total = total + fact.usage
    reasoning = share = None
    if agent in REPORTS_REASONING:
        reasoning = int(selection.rows("coalesce(sum(reasoning), 0)")[0][0])
    if agent in STATES_CONTEXT_WINDOW:
        from exporter.projections import context_share  # noqa: PLC0415 - Codex only

        share = context_share.of_selection(selection)
    return AgentUsage(agent, total, reasoning, measures_cache_writes(agent), share)


def measures_cache_writes(agent: str) -> bool:
    """Whether ``agent``'s logs say what was written to the prompt cache ("" : a mix, yes)."""
    return not agent or agent in MEASURES_CACHE_WRITES


def all_measure_cache_writes(found: Mapping[str, Scope]) -> bool:
    """Whether a report over these scopes has measured cache writes (false: Codex alone)."""
    return not found or any(measures_cache_writes(a) for a in found)


def by_agent(base: Selection, found: Mapping[str, Scope],
             prices: ClassPrices) -> dict[str, AgentUsage]:
    """Each agent's usage over ``base``'s range and filters: two or more, or Codex alone.

    Codex alone gets its line too: its reasoning and context-window share are
    figures no other part of the summary has. Claude Code alone gets none (its
    report is as it was before there were agents).
    """
    if len(found) < 2 and not set(found) & (REPORTS_REASONING | STATES_CONTEXT_WINDOW):
        return {}
    return {agent: usage_of(s.of(base), prices, agent) for agent, s in found.items()}


def split_view(build: Callable[[Selection], Any], base: Selection,
               found: Mapping[str, Scope]) -> dict[str, Any]:
    """``build`` run over each agent's part of ``base`` (views.by_agent merges the results)."""
    return {agent: build(s.of(base)) for agent, s in found.items()}
