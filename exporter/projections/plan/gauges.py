"""The plan-limit metric families, as data the metrics projection registers.

Each :class:`Family` names an observable instrument (without the namespace;
counters without ``_total``, which the Prometheus translation appends) and
how to read its series from one :class:`PlanFigures`. The projection computes
the figures once per scrape (:class:`FiguresCache`) and registers, for each
family, an observable gauge or counter whose callback is ``observe(figures)``.
Series vanish while there is nothing to say (no sample yet, no estimate).
docs/plan-limits.md lists the same families for users.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from exporter.projections.plan.windows import PlanFigures

Series = list[tuple[float, dict[str, str]]]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: name (no namespace), kind, labels, help text, observer."""

    name: str
    kind: Literal["gauge", "counter"]
    labels: tuple[str, ...]
    help: str
    observe: Callable[[PlanFigures], Series]

    def exposed(self, namespace: str = "claude_code") -> str:
        """The name as Prometheus shows it."""
        suffix = "_total" if self.kind == "counter" else ""
        return f"{namespace}_{self.name}{suffix}"


def _per_window(
    value: Callable[[str, PlanFigures], float | None],
) -> Callable[[PlanFigures], Series]:
    """An observer yielding one series per window that has a value."""

    def observe(figures: PlanFigures) -> Series:
        out: Series = []
        for name in figures.windows:
            v = value(name, figures)
            if v is not None:
                out.append((v, {"window": name}))
        return out

    return observe


def _single(value: Callable[[PlanFigures], float | None]) -> Callable[[PlanFigures], Series]:
    """An observer yielding one unlabelled series when it has a value."""

    def observe(figures: PlanFigures) -> Series:
        v = value(figures)
        return [] if v is None else [(v, {})]

    return observe


def _by(attr: str, label: str) -> Callable[[PlanFigures], Series]:
    """An observer yielding a labelled counter per key of a figures mapping."""

    def observe(figures: PlanFigures) -> Series:
        counts: dict[str, int] = getattr(figures, attr)
        return [(float(n), {label: key}) for key, n in counts.items()]

    return observe


def _usd_per_percent(name: str, f: PlanFigures) -> float | None:
    est = f.windows[name].estimate
    return None if est is None else est.usd_per_percent


def _pairs(name: str, f: PlanFigures) -> float | None:
    est = f.windows[name].estimate
    return None if est is None or est.usd_per_percent is None else float(est.pairs)


def _projected(name: str, f: PlanFigures) -> float | None:
    pace = f.windows[name].pace
    return None if pace is None or pace.projected_percent is None else pace.projected_percent / 100


def _limit_at(name: str, f: PlanFigures) -> float | None:
    pace = f.windows[name].pace
    return None if pace is None else pace.limit_at


PLAN_FAMILIES: Final[tuple[Family, ...]] = (
    Family("plan_window_used_ratio", "gauge", ("window",),
           "Official plan-window utilisation 0-1 from the status line (0 once the window reset).",
           _per_window(lambda n, f: f.windows[n].used_ratio)),
    Family("plan_window_resets_at_seconds", "gauge", ("window",),
           "When the plan window resets, Unix seconds.",
           _per_window(lambda n, f: f.windows[n].resets_at)),
    Family("plan_window_samples", "counter", (),
           "Distinct status-line samples recorded.",
           _single(lambda f: float(f.samples))),
    Family("plan_windows_exhausted", "counter", ("window",),
           "Plan-window instances that reached 100 %.",
           _per_window(lambda n, f: float(f.windows[n].exhausted))),
    Family("plan_sample_age_seconds", "gauge", (),
           "Seconds since the status line last reported.",
           _single(lambda f: f.sample_age_seconds)),
    Family("context_window_used_ratio", "gauge", (),
           "Context-window fill 0-1 of the most recently refreshed session.",
           _single(lambda f: f.context_used_ratio)),
    Family("plan_window_usd_per_percent", "gauge", ("window",),
           "Estimated list-price USD per 1 % of the plan window (a lower bound with other "
           "machines).",
           _per_window(_usd_per_percent)),
    Family("plan_window_usd_per_percent_pairs", "gauge", ("window",),
           "Change-point pairs behind the USD-per-percent estimate.",
           _per_window(_pairs)),
    Family("plan_window_projected_ratio", "gauge", ("window",),
           "Plan-window utilisation 0-1 projected at its reset at the current pace (absent: "
           "not enough data yet).",
           _per_window(_projected)),
    Family("plan_window_limit_at_seconds", "gauge", ("window",),
           "When the plan window reaches 100 % at the current pace (or reached it), Unix "
           "seconds; absent when on track or without enough data.",
           _per_window(_limit_at)),
    Family("exporter_statusline_failures", "counter", ("reason",),
           "Status-line refreshes that recorded no sample or whose --then command failed, "
           "by reason.",
           _by("failures", "reason")),
    Family("exporter_plan_spool_rejected_lines", "counter", ("reason",),
           "Spool lines that were not status-line records, by reason.",
           _by("rejected", "reason")),
)


def _of_agent(
    agent: str, observe: Callable[[PlanFigures], Series],
) -> Callable[[PlanFigures], Series]:
    """An observer reading an other agent's figures (nothing while it has none)."""

    def of(figures: PlanFigures) -> Series:
        own = figures.agents.get(agent)
        return [] if own is None else observe(own)

    return of


#: The status line's families an other agent's readings feed too, with their help text
#: (``{name}``: the agent's name).
_SHARED: Final = {
    "plan_window_used_ratio": "Official plan-window utilisation 0-1 from {name}'s logs (0 once "
                              "the window reset).",
    "plan_window_resets_at_seconds": "When the {name} plan window resets, Unix seconds.",
    "plan_window_samples": "Distinct {name} rate-limit readings recorded.",
    "plan_windows_exhausted": "{name} plan-window instances that reached 100 %.",
    "plan_sample_age_seconds": "Seconds since the newest {name} rate-limit reading.",
    "plan_window_projected_ratio": "{name} plan-window utilisation 0-1 projected at its reset "
                                   "at the current pace of {name}'s own spend (absent: not "
                                   "enough data yet).",
    "plan_window_limit_at_seconds": "When the {name} plan window reaches 100 % at the current "
                                    "pace (or reached it), Unix seconds; absent when on track "
                                    "or without enough data.",
}


def agent_families(agent: str, name: str) -> tuple[Family, ...]:
    """An other agent's plan families: ``<agent>_plan_*``, the status line's under its prefix.

    Families of their own rather than an ``agent`` label on the status line's
    (docs/metrics.md, "Plan limits"): those keep their label sets and their bytes.
    Series appear only once the agent recorded a reading (or refused one).
    """
    shared = tuple(
        Family(f"{agent}_{fam.name}", fam.kind, fam.labels, _SHARED[fam.name].format(name=name),
               _of_agent(agent, fam.observe))
        for fam in PLAN_FAMILIES if fam.name in _SHARED)
    return (*shared, Family(
        f"{agent}_plan_rejected_readings", "counter", ("reason",),
        f"{name} rate-limit readings refused (malformed or implausible), by reason.",
        _of_agent(agent, _by("rejected", "reason"))))


#: Every plan family the projection registers: the status line's, then Codex's.
ALL_FAMILIES: Final[tuple[Family, ...]] = (*PLAN_FAMILIES, *agent_families("codex", "Codex"))


class FiguresCache:
    """The figures computed at most once per ``ttl`` seconds: one scrape reads every family."""

    def __init__(self, compute: Callable[[], PlanFigures], monotonic: Callable[[], float],
                 ttl: float = 1.0) -> None:
        """``compute`` builds fresh figures (e.g. ``plan_figures`` on a read connection)."""
        self._compute = compute
        self._mono = monotonic
        self._ttl = ttl
        self._at: float | None = None
        self._figures = PlanFigures()

    def get(self) -> PlanFigures:
        """The cached figures, recomputed when older than the ttl."""
        now = self._mono()
        if self._at is None or now - self._at >= self._ttl:
            self._figures = self._compute()
            self._at = now
        return self._figures


Observe = Callable[[], Iterable[tuple[float, dict[str, str]]]]
"""The projection's gauge-source form (instruments.Observe)."""


def observers(get: Callable[[], PlanFigures]) -> dict[str, Observe]:
    """Per family name, a zero-argument observer in instruments.Observe form."""

    def bind(fam: Family) -> Observe:
        return lambda: fam.observe(get())

    return {fam.name: bind(fam) for fam in ALL_FAMILIES}


def register(meter: Any, namespace: str, get: Callable[[], PlanFigures]) -> None:
    """Create every family as an observable instrument of an OpenTelemetry ``meter``.

    Gauges become observable gauges, counters observable counters (the
    Prometheus reader appends ``_total``). ``get`` is called once per family per
    collection: pass a :class:`FiguresCache`'s ``get``.
    """
    from opentelemetry.metrics import CallbackOptions, Observation  # noqa: PLC0415

    def callback(fam: Family) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value, labels) for value, labels in fam.observe(get())]

        return observe

    for fam in ALL_FAMILIES:
        create = (meter.create_observable_counter if fam.kind == "counter"
                  else meter.create_observable_gauge)
        create(f"{namespace}_{fam.name}", callbacks=[callback(fam)], description=fam.help)
