"""The attribution families of /metrics: requests and cost by skill, plugin, MCP, agent, effort.

``claude_code_attributed_requests_total{kind, name}`` and
``claude_code_attributed_cost_usd_total{kind, name}``: ``kind`` is one of
:data:`KINDS`, ``name`` the value the requests carried (docs/metrics.md,
docs/figures.md "Attribution"). Requests without a value are in no series of
that kind (the rest of ``claude_code_cost_usd_total``): only what a line named
is exposed.

Labels: a skill, plugin, MCP server or agent name can be private like a
project's name, so they follow ``--project-label``: ``basename`` and ``full``
keep the name, ``hash`` shows a 12-digit hash, ``none`` exposes no name of
those kinds (effort, a closed vocabulary, always). Each kind keeps at most
:data:`MAX_NAMES` names; past them a new one is ``other`` (the projects' rule),
so a family has at most ``len(KINDS) × (MAX_NAMES + 1)`` series.

The sums are not in the ledger's rollups (their key has no attribution):
start-up reads the ledger's attribution day sums (exporter.ledger.attr_days:
rows per day, session and value, summed per price class in SQL; the requests
when the sums cannot answer, see :meth:`Attributed.load`), then each batch's
new and upgraded rows are priced as they come. A first pass's batches
(exporter.ledger.raw_pass) carry no row lists (``serve`` runs that pass before
it loads the projection; this is for any such batch after): the sums are
then read again from the ledger on the projection's first turn after them (it
settles once a second), and during a long run of them at most once per
:data:`RELOAD_SECONDS`. A counter never goes down: a request whose value
changes moves no cost out of its old series.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Final

from exporter.ledger import attr_days as attribution_days
from exporter.ledger import slots
from exporter.projections.class_prices import ClassPrices
from exporter.projections.labels import LabelPolicy
from exporter.projections.pricing import RateTable
from exporter.projections.selection import SUMS_SQL, Reader
from exporter.projections.usage import Attrs
from exporter.records import ATTRIBUTION, Request, Source
from exporter.sqlite import sqlite3

KINDS: Final = ATTRIBUTION  # skill, plugin, mcp_server, agent, effort
MAX_NAMES: Final = 64  # names per kind before ``other``
RELOAD_SECONDS: Final = 30.0
PRIVATE: Final = ("skill", "plugin", "mcp_server", "agent")  # names under --project-label
FAMILIES: Final = ("attributed_requests", "attributed_cost_usd")
_SOURCES: Final = tuple(Source)

Key = tuple[str, str]  # (kind, raw value)
Sample = tuple[str, tuple[tuple[str, str], ...]]  # (family, labels)


class Names:
    """The ``name`` label of a value: the project label policy, then a cap per kind."""

    def __init__(self, project_policy: str = "basename", max_names: int = MAX_NAMES) -> None:
        """``project_policy``: ``basename``, ``full``, ``hash`` or ``none`` (--project-label)."""
        self.policy = project_policy
        # A LabelPolicy per kind for its capped, cleaned model-style values (no path rules).
        self._caps = {k: LabelPolicy(max_models=max_names) for k in KINDS}

    def label(self, kind: str, value: str) -> str | None:
        """The label value, or None when the policy exposes no name of this kind."""
        if kind in PRIVATE:
            if self.policy == "none":
                return None
            if self.policy == "hash":
                value = hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:12]
        return self._caps[kind].model(value)


class Attributed:
    """Sums per (kind, value) and their growth as counter samples."""

    def __init__(self, pricing: RateTable, names: Names, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Price with ``pricing``; label with ``names``; ``clock`` paces the reloads."""
        self.prices = ClassPrices.of(pricing)
        self.names = names
        self._clock = clock
        self._sums: dict[Key, list[int]] = {}  # [requests, cost in pico-USD]
        self._read: Reader | None = None
        self._view = "requests"
        self._scope: str | None = None
        self._stale = False
        self._loaded_at = 0.0

    def load(self, read: Reader, view: str, scope: str | None = None) -> dict[Sample, float]:
        """Start-up: the sums of every request of ``view`` (the scoped ledger); their samples.

        ``scope``: the scope's condition on a roots bitmask ``roots``
        (``Ledger.scope_filter``); with it, or for the whole ledger, the day
        sums answer (when kept, and split as the price table needs: the
        report's rule), else the requests of ``view`` are grouped.
        """
        self._read, self._view, self._scope = read, view, scope
        return self._grow(self._query())

    def apply(self, new: Sequence[Request], upgraded: Sequence[tuple[Request, Request]],
              raw: bool) -> dict[Sample, float]:
        """One batch: its rows priced (``raw``: a first pass's batch, without rows)."""
        if raw:
            self._stale = True
        # Read again once the pass is over (a batch with rows, or the settling turn that
        # follows every second), and during a long pass every RELOAD_SECONDS.
        if self._stale and self._read is not None and (
                not raw or self._clock() - self._loaded_at >= RELOAD_SECONDS):
            self._stale = False
            return self._grow(self._query())
        if self._stale:
            return {}  # the reload will count these rows too
        delta: dict[Key, list[int]] = {}
        for req in new:
            self._add(delta, req, 1)
        for old, req in upgraded:
            self._add(delta, old, -1)
            self._add(delta, req, 1)
        target = {k: [a + b for a, b in zip(self._sums.get(k, [0, 0]), d, strict=True)]
                  for k, d in delta.items()}
        return self._grow(target, partial=True)

    def _add(self, into: dict[Key, list[int]], req: Request, sign: int) -> None:
        """Add (or take away) one request's count and cost under each value it carries."""
        values = (req.skill, req.plugin, req.mcp_server, req.agent, req.effort)
        if not any(values):
            return
        cost = self._cost(req)
        for kind, value in zip(KINDS, values, strict=True):
            if value:
                acc = into.setdefault((kind, value), [0, 0])
                acc[0] += sign
                acc[1] += sign * cost

    def _cost(self, req: Request) -> int:
        """One request's list-price cost in pico-USD (as the report prices it)."""
        p = self.prices
        long = sum(req.context > t for t in p.thresholds)
        period = sum(req.ts >= s for s in p.starts)
        attrs = Attrs("", "", req.model, req.source, req.service_tier, req.inference_geo,
                      req.speed, long)
        sums = [req.input, req.output, req.cache_read, req.cache_write_5m, req.cache_write_1h,
                req.web_search]
        return self.prices.usage(attrs, period, req.ts, 1, sums).cost_pico

    def _query(self) -> dict[Key, list[int]]:
        """Every attributed request's sums from the ledger, per (kind, value)."""
        assert self._read is not None
        self._loaded_at = self._clock()
        if self._days_answer():
            return self._query_days()
        p = self.prices
        rows = self._read(
            f"SELECT {', '.join(KINDS)}, model, source, service_tier, inference_geo, speed, "
            f"{p.long_sql()}, {p.period_sql('ts')}, min(ts), count(*), {SUMS_SQL} "
            f"FROM {self._view} WHERE " + " OR ".join(f"{k} != ''" for k in KINDS)
            + " GROUP BY " + ", ".join(map(str, range(1, 13))), [])
        out: dict[Key, list[int]] = {}
        for row in rows:
            values, (model, source, tier, geo, speed, long, period, first, n, *sums) = \
                row[:5], row[5:]
            attrs = Attrs("", "", model, _SOURCES[source], tier, geo, speed, int(long))
            usage = p.usage(attrs, int(period), float(first), int(n),
                            [int(v or 0) for v in sums])
            for kind, value in zip(KINDS, values, strict=True):
                if value:
                    acc = out.setdefault((kind, value), [0, 0])
                    acc[0] += usage.requests
                    acc[1] += usage.cost_pico
        return out

    def _days_answer(self) -> bool:
        """Whether the day sums hold this scope's figures, split as our prices need."""
        assert self._read is not None
        if self._view != "requests" and self._scope is None:
            return False  # a scoped view without its condition on roots: the requests
        try:
            stored = slots.read_thresholds(self._read)
            return (self.prices.fits_slots(stored) and self.prices.fits_days
                    and attribution_days.current(self._read))
        except sqlite3.OperationalError:  # an older layout without the slot tables
            return False

    def _query_days(self) -> dict[Key, list[int]]:
        """:meth:`_query` from the day sums: per kind, value and price class, in SQL."""
        assert self._read is not None
        p = self.prices
        level = p.relevel(slots.read_thresholds(self._read))
        inner = ", ".join(f"sum({c}) AS {c}" for c in attribution_days.SUMS)
        outer = ", ".join(f"sum(x.{c})" for c in attribution_days.SUMS)
        scope = f" AND ({self._scope})" if self._view != "requests" and self._scope else ""
        # Per key first (the table's rows), then per price class through the few keys.
        rows = self._read(
            f"WITH x AS MATERIALIZED (SELECT kind, value, key, {p.period_sql('day * 86400')} "
            f"AS period, min(first) AS first, {inner} FROM attr_days "
            f"WHERE kind < {attribution_days.PAIRS} AND value != ''{scope} GROUP BY 1, 2, 3, 4) "
            "SELECT x.kind, x.value, k.model, k.source, k.service_tier, k.inference_geo, "
            f"k.speed, k.long, x.period, min(x.first), {outer} FROM x "
            "JOIN slot_keys k ON k.id = x.key GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9", [])
        out: dict[Key, list[int]] = {}
        for kind, value, model, source, tier, geo, speed, long, period, first, n, *rest in rows:
            attrs = Attrs("", "", model, _SOURCES[source], tier, geo, speed, level[long])
            usage = p.usage(attrs, int(period), float(first), int(n), [int(v) for v in rest])
            acc = out.setdefault((KINDS[kind], value), [0, 0])
            acc[0] += usage.requests
            acc[1] += usage.cost_pico
        return out

    def _grow(self, target: dict[Key, list[int]], partial: bool = False) -> dict[Sample, float]:
        """Move the sums to ``target`` (all keys, or only its own with ``partial``): the growth.

        A key's growth is clipped at zero per series: counters never go down.
        """
        growth: dict[Sample, float] = {}
        keys = target.keys() if partial else self._sums.keys() | target.keys()
        for key in sorted(keys):  # a stable series order, whatever the hash seed
            was = self._sums.get(key, [0, 0])
            now = target.get(key, was if partial else [0, 0])
            now = [max(a, b) for a, b in zip(was, now, strict=True)]
            self._sums[key] = now
            name = self.names.label(*key)
            if name is None:
                continue
            labels = (("kind", key[0]), ("name", name))
            growth[(FAMILIES[0], labels)] = growth.get((FAMILIES[0], labels), 0) + (
                now[0] - was[0])
            growth[(FAMILIES[1], labels)] = growth.get((FAMILIES[1], labels), 0) + (
                (now[1] - was[1]) / 1e12)
        return growth
