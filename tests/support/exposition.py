"""A scrape, parsed with prometheus_client's own parser, and sums over its samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Families = dict[str, Any]
"""Metric families by name, as ``text_string_to_metric_families`` yields them."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Sample values by (sample name, sorted labels)."""


def families(text: str) -> Families:
    """The families of an exposition text, by name."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def total(source: Mapping[str, Any] | str, family: str, sample: str | None = None, /,
          **match: str) -> float:
    """Sum of a family's samples named ``sample`` whose labels include ``match``.

    ``source`` is parsed families or exposition text (positional, like ``family`` and
    ``sample``: every keyword is a label, ``source`` among them). ``sample`` defaults to
    ``<family>_total`` for a counter, the family's name otherwise. A family with
    no series yet counts 0: the OpenTelemetry exporter emits a family only once
    something was recorded in it.
    """
    fams = families(source) if isinstance(source, str) else source
    if family not in fams:
        return 0.0
    fam = fams[family]
    name = sample or (fam.name + "_total" if fam.type == "counter" else fam.name)
    return float(sum(s.value for s in fam.samples
                     if s.name == name and all(s.labels.get(k) == v for k, v in match.items())))


def counter_samples(fams: Mapping[str, Any]) -> Samples:
    """Every monotonic sample (counters, histogram buckets/counts/sums) by name and labels."""
    out = {}
    for fam in fams.values():
        if fam.type in ("counter", "histogram"):
            for s in fam.samples:
                if not s.name.endswith("_created"):
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
