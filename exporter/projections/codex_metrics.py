"""Codex's families of /metrics and backfill: ``claude_code_codex_*`` (docs/metrics.md, "Codex").

Codex turns are counted by the same rules as Claude Code's requests (the
ledger's rollups, :mod:`exporter.projections.counting`), but exposed under
families of their own, never in Claude Code's: a Claude-only user's
exposition stays byte-identical (no new label, no new series), each family
keeps one label set, and what has no meaning for Codex (cache writes by TTL,
counters split by the cache TTLs' idle gaps, advisor consultations) is
absent rather than shown as zeros as if measured. The families:
``codex_requests``, ``codex_tokens`` (input, output, cache_read, reasoning),
``codex_cost_usd``, ``codex_unpriced_tokens``, ``codex_cache_savings_usd``,
``codex_upload_bytes``, ``codex_kv_recomputed_bytes`` and the histograms of
context, output and gap. A Codex turn is always a main request, so no family
has a ``source`` label; models have a cap of their own (labels.MAX_CODEX_MODELS).

Which rows are Codex's: a rollup row by its roots bitmask (:class:`Agents`:
bits of Codex homes only; a v1 row, or one sharing a bit with a Claude Code
root, stays Claude Code's), a request row by its key (the Codex parser's
prefix: rows carry no bitmask). Both agree: a Codex key comes only from a
Codex home. Reasoning is not in the rollups; it comes from the rows
(:class:`Reasoning`: a sum over the ledger's Codex keys at start, the rows
of each batch after).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from exporter.ingest.codex import KEY_PREFIX
from exporter.ingest.formats import CODEX
from exporter.projections.counting import Exposure, Labels, SampleKey, Sums
from exporter.projections.labels import MAX_CODEX_MODELS, LabelPolicy
from exporter.projections.pricing import RateTable
from exporter.projections.project_groups import ProjectGroups
from exporter.projections.selection import Reader
from exporter.records import ALL_ROOTS, CountClass, HistSeries, Request

TOKEN_TYPES: Final = ("input", "output", "cache_read")  # reasoning comes from the rows
REASONING: Final = "reasoning"
RELOAD_SECONDS: Final = 30.0  # at most one reasoning re-read per this during a first pass
#: Claude Code's counter families that carry to Codex, and their Codex names.
COUNTERS: Final = {"requests": "codex_requests", "tokens": "codex_tokens",
                   "cost_usd": "codex_cost_usd", "unpriced_tokens": "codex_unpriced_tokens",
                   "cache_savings_usd": "codex_cache_savings_usd",
                   "upload_bytes": "codex_upload_bytes",
                   "kv_recomputed_bytes": "codex_kv_recomputed_bytes"}
HISTOGRAMS: Final = {"request_context_tokens": "codex_request_context_tokens",
                     "request_output_tokens": "codex_request_output_tokens",
                     "request_gap_seconds": "codex_request_gap_seconds"}
_KEY_END: Final = KEY_PREFIX[:-1] + chr(ord(KEY_PREFIX[-1]) + 1)  # just past every Codex key


def is_codex(req: Request) -> bool:
    """Whether a request row is a Codex turn (by its key: exporter.ingest.codex)."""
    return req.key.startswith(KEY_PREFIX)


class Agents:
    """Which roots bitmasks are Codex's: bits of Codex homes, none of Claude Code's roots."""

    def __init__(self) -> None:
        """No root known yet: every row is Claude Code's."""
        self.codex = 0
        self.claude = 0

    def learn(self, agents: Mapping[str, str], bits: Mapping[str, int]) -> None:
        """Take in roots' agents (``Ledger.root_agents``, ``Applied.agents``) and bits."""
        for path, bit in bits.items():
            if agents.get(path) == CODEX:
                self.codex |= bit
            else:
                self.claude |= bit

    def is_codex(self, mask: int) -> bool:
        """True for a rollup row of Codex homes only (v1 rows and shared bits: Claude Code's)."""
        return mask != ALL_ROOTS and bool(mask & self.codex) and not mask & self.claude


class CodexExposure:
    """Codex's sample values from a class's sums: Claude Code's rules, Codex's families."""

    def __init__(self, pricing: RateTable, project_label: str, groups: ProjectGroups,
                 kv_bytes_per_token: Mapping[str, int], upload_bytes_per_token: float) -> None:
        """Prices, the project policy and grouping (shared), and the byte estimates.

        The label policy is Codex's own (its caps count Codex's names only), so
        Codex never moves a Claude Code series into ``other``.
        """
        self.labels = LabelPolicy(project_label, max_models=MAX_CODEX_MODELS, groups=groups)
        self._inner = Exposure(pricing, self.labels, kv_bytes_per_token, upload_bytes_per_token)

    def samples(self, cls: CountClass, sums: Sums) -> list[tuple[SampleKey, float]]:
        """Every Codex counter sample a class's sums make (zeros included; none for a gap key).

        The reasoning series appears at 0 with the class's series: its value
        comes from the rows (:class:`Reasoning`).
        """
        if cls.gap:
            return []  # the gap-bucket counters are cut at Claude Code's cache TTLs
        out: list[tuple[SampleKey, float]] = []
        for (name, labels), value in self._inner.samples(cls, sums):
            family = COUNTERS.get(name)
            kind = dict(labels).get("type")
            if family is None or (kind is not None and kind not in TOKEN_TYPES):
                continue
            kept = tuple(kv for kv in labels if kv[0] != "source"
                         and not (family == "codex_cache_savings_usd" and kv[0] == "type"))
            out.append(((family, kept), value))
        out.append((self.reasoning_key(cls.model, cls.project), 0))
        return out

    def reasoning_key(self, model: str, project: str) -> SampleKey:
        """The reasoning series of a raw model and cwd."""
        return ("codex_tokens", (("model", self.labels.model(model)),
                                 ("project", self.labels.project(project)),
                                 ("type", REASONING)))

    def hist(self, series: HistSeries) -> tuple[str, Labels] | None:
        """A Codex histogram series' family and labels (None: a histogram Codex has not)."""
        family = HISTOGRAMS.get(series.name)
        if family is None:
            return None
        if series.model:
            return family, (("model", self.labels.model(series.model)),)
        return family, ()


class Reasoning:
    """Reasoning tokens per raw (model, cwd) of Codex rows, and their growth as samples.

    The rollups have no reasoning sum: start-up sums the ledger's Codex rows
    (a range of the key index: nothing to read in a ledger without Codex),
    each batch adds its rows'. A first pass's batches carry no rows: the sum
    is read again on the next batch with rows (or settling turn), at most
    once per :data:`RELOAD_SECONDS` during a long pass. Sums only grow.
    """

    def __init__(self, exposure: CodexExposure,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Labels from ``exposure``; ``clock`` paces the re-reads."""
        self.exposure = exposure
        self._clock = clock
        self._sums: dict[tuple[str, str], int] = {}
        self._read: Reader | None = None
        self._view = "requests"
        self._stale = False
        self._loaded_at = 0.0

    def load(self, read: Reader, view: str) -> dict[SampleKey, float]:
        """Start-up: the reasoning of every Codex row of ``view`` (the scoped requests)."""
        self._read, self._view = read, view
        return self._grow(self._query(), whole=True)

    def apply(self, new: Iterable[Request], upgraded: Iterable[tuple[Request, Request]],
              raw: bool) -> dict[SampleKey, float]:
        """One batch's rows (``raw``: a first pass's batch, without rows)."""
        if raw:
            self._stale = True
        if self._stale and self._read is not None and (
                not raw or self._clock() - self._loaded_at >= RELOAD_SECONDS):
            self._stale = False
            return self._grow(self._query(), whole=True)
        if self._stale:
            return {}  # the re-read will count these rows
        delta: dict[tuple[str, str], int] = {}
        for req in new:
            if req.reasoning and is_codex(req):
                key = (req.model, req.project)
                delta[key] = delta.get(key, 0) + req.reasoning
        for old, req in upgraded:
            if req.reasoning != old.reasoning and is_codex(req):
                key = (req.model, req.project)  # an upgrade keeps the row's model and cwd
                delta[key] = delta.get(key, 0) + req.reasoning - old.reasoning
        return self._grow({k: self._sums.get(k, 0) + d for k, d in delta.items()}, whole=False)

    def _query(self) -> dict[tuple[str, str], int]:
        """The ledger's reasoning sums of Codex rows, by raw model and cwd."""
        assert self._read is not None
        self._loaded_at = self._clock()
        rows = self._read(
            f"SELECT model, project, sum(reasoning) FROM {self._view} "
            "WHERE key >= ? AND key < ? AND reasoning > 0 GROUP BY 1, 2", [KEY_PREFIX, _KEY_END])
        return {(str(m), str(p)): int(n) for m, p, n in rows}

    def _grow(self, target: Mapping[tuple[str, str], int],
              whole: bool) -> dict[SampleKey, float]:
        """Move the sums up to ``target``; the growth per series (never below zero)."""
        growth: dict[SampleKey, float] = {}
        for key in sorted(target if not whole else target.keys() | self._sums.keys()):
            was = self._sums.get(key, 0)
            now = max(was, target.get(key, was))
            self._sums[key] = now
            if now != was:
                sample = self.exposure.reasoning_key(*key)
                growth[sample] = growth.get(sample, 0) + now - was
        return growth
