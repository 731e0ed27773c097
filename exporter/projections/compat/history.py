"""The compatibility families in ``backfill``'s timeline, under the names Prometheus gives them.

The timeline (:mod:`exporter.projections.timeline`) replays the ledger request
by request and logs every series at step boundaries. With compatibility modes
on it asks this module, for each request, what the compatibility families
gain: the native counters' growth of the request's class (the same samples
:class:`~exporter.projections.compat.families.Families` adds in ``serve``) and
the GenAI histogram series of its observations. Names and label names are the
OpenTelemetry-to-Prometheus translation of the instruments' (what a scrape of
``serve`` shows), so backfilled history continues into the live scrapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from exporter.projections.compat import genai_histogram as genai
from exporter.projections.compat import native
from exporter.projections.compat.families import check
from exporter.projections.counting import Exposure, Labels, Sums
from exporter.records import CountClass, HistSeries

TOKEN_FAMILY: Final = "claude_code_token_usage_tokens"  # name + "_" + unit; "_total" added later
COST_FAMILY: Final = "claude_code_cost_usage_USD"
GENAI_FAMILY: Final = "gen_ai_client_token_usage"  # a unit in braces adds no suffix
FAMILIES: Final = {native.TOKEN_USAGE: TOKEN_FAMILY, native.COST_USAGE: COST_FAMILY,
                   genai.NAME: GENAI_FAMILY}
HELP: Final = {TOKEN_FAMILY: native.TOKEN_DESCRIPTION, COST_FAMILY: native.COST_DESCRIPTION,
               GENAI_FAMILY: genai.DESCRIPTION}
HISTOGRAM_FAMILIES: Final = frozenset({GENAI_FAMILY})

Growth = tuple[str, Labels, float]  # Prometheus family (counters: without _total), labels, amount


class History:
    """What the compatibility families of ``modes`` gain per request, for the timeline."""

    def __init__(self, modes: Sequence[str], exposure: Exposure) -> None:
        """Families of ``modes`` under ``exposure``'s label policy and prices."""
        self.modes = check(modes)
        self.exposure = exposure
        self._native = native.Native(exposure) if "native" in self.modes else None

    def growth(self, cls: CountClass, old: Sums, new: Sums) -> list[Growth]:
        """The native counters' growth when a class's sums go from ``old`` to ``new``."""
        if self._native is None:
            return []
        out = dict(self._native.samples(cls, new))
        for key, value in self._native.samples(cls, old):
            out[key] = out.get(key, 0) - value
        return [(FAMILIES[name], labels, value) for (name, labels), value in out.items()]

    @staticmethod
    def owns(series: HistSeries) -> bool:
        """True for a compatibility histogram series (the timeline must not name it itself)."""
        return series.name == genai.NAME

    def histogram(self, series: HistSeries) -> tuple[str, Labels, tuple[float, ...]] | None:
        """Family, Prometheus labels and bounds of a series of :meth:`owns` (None: mode off)."""
        if "genai" not in self.modes:
            return None
        attrs = genai.attributes(self.exposure.labels.model(series.model), series.arch)
        labels = tuple((k.replace(".", "_"), v) for k, v in attrs)
        return GENAI_FAMILY, labels, tuple(float(b) for b in genai.BOUNDS)
