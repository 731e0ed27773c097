"""Which requests a report covers, how it groups them by time, and the filters' names.

:class:`Selection` is the scoped ledger view, time range and filters;
:class:`TimeKey` a grouping by time; ``--project``/``--model`` names resolve
to exact values here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from exporter.ledger import slots
from exporter.projections.periods import Range
from exporter.projections.project_groups import ProjectGroups
from exporter.records import Source

Reader = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one read-only query with its parameters and returns every row (``Ledger.read``)."""

CONTEXT_SQL: Final = "(input + cache_read + cache_write_5m + cache_write_1h)"
# The six sums a priced Usage is made of, in ClassPrices.usage's order.
SUMS_SQL: Final = ("sum(input), sum(output), sum(cache_read), sum(cache_write_5m), "
                   "sum(cache_write_1h), sum(web_search)")
_SLOT: Final = slots.SLOT_SECONDS
_THRESHOLDS: Final = slots.DEFAULT_THRESHOLDS


@dataclass(frozen=True, slots=True)
class TimeKey:
    """A grouping by time: ``sql(t)`` is its SQL given an SQL expression of epoch seconds.

    For slot sums, ``slot_time`` stands for the time of their requests, and
    ``mixed`` lists the slots whose requests the key splits (read one by one).
    """

    sql: Callable[[str], str]
    aligned: bool = True  # False: the key changes inside slots; use the requests only
    slot_time: str = f"slot * {_SLOT}"
    mixed: tuple[int, ...] = ()
    day_aligned: bool = False  # True: the key never changes inside a UTC day


@dataclass(frozen=True, slots=True)
class Selection:
    """Which requests a report covers: a scoped ledger view, a time range, filters."""

    read: Reader
    relation: str  # the ledger's scoped view (``Ledger.scope``) or ``requests``
    range: Range
    projects: tuple[str, ...] = ()  # exact project paths (see :func:`resolve_projects`)
    models: tuple[str, ...] = ()  # exact model ids
    sources: tuple[Source, ...] = ()
    slots: bool = False  # the ledger keeps usage slots (exporter.ledger.slots)
    days: bool = False  # … and their sums per UTC day
    slot_thresholds: tuple[int, ...] = _THRESHOLDS  # the long-context split of the slot sums
    slot_scope: str | None = None  # SQL condition on ``slots`` for the scope; None: all
    context: str = CONTEXT_SQL  # the prompt size: the ledger's indexed column when it has one
    groups: ProjectGroups | None = None  # which project a cwd belongs to (None: its own)
    unindexed: bool = False  # rows may wait outside the value indexes (exporter.ledger.unindexed)

    def project_of(self, cwd: str) -> str:
        """The project a request's working directory belongs to (see ``groups``)."""
        return cwd if self.groups is None else self.groups.of(cwd)

    def where(self, *extra: str, extra_params: Sequence[object] = ()) -> tuple[str, list[object]]:
        """The WHERE condition (and parameters) of this selection, plus ``extra`` terms.

        ``extra_params`` are the parameters of the ``?`` in ``extra``.
        """
        cond, params = self.range.sql()
        params.extend(extra_params)
        parts = [cond, *extra, *self._filters(params)]
        return " AND ".join(p for p in parts if p != "1") or "1", params

    def _filters(self, params: list[object]) -> list[str]:
        """Conditions for --project, --model and --source (adding their parameters)."""
        parts = []
        for column, values in (("project", self.projects), ("model", self.models)):
            if values:
                parts.append(f"{column} IN ({','.join('?' * len(values))})")
                params.extend(values)
        if self.sources:
            parts.append(f"source IN ({','.join(str(int(s)) for s in self.sources)})")
        return parts

    @property
    def filtered(self) -> bool:
        """Whether --project, --model or --source narrow the selection."""
        return bool(self.projects or self.models or self.sources)

    def rows(self, select: str, *extra: str, tail: str = "",
             params: Sequence[object] = (), join: str = "") -> list[tuple[Any, ...]]:
        """Run ``SELECT select FROM [join] relation AS r WHERE … tail`` over this selection.

        ``params`` are the parameters of the ``?`` in ``extra`` (``select``,
        ``tail`` and ``join`` take none); ``join`` ends in ``JOIN``.
        """
        cond, where_params = self.where(*extra, extra_params=params)
        sql = f"SELECT {select} FROM {join} {self.relation} AS r WHERE {cond} {tail}"
        return self.read(sql, where_params)

    def bounds(self) -> tuple[float, float] | None:
        """Times of the first and last selected request, or None when there is none."""
        first, last = self.largest("min(ts)"), self.largest("max(ts)")
        return None if first is None else (float(first), float(last))

    def largest(self, aggregate: str) -> Any:
        """One ``min(x)`` or ``max(x)`` alone in its query: SQLite then seeks x's index."""
        return self.rows(aggregate)[0][0]

# ---- --project and --model: names as users type them -> exact values -----------------
class FilterError(ValueError):
    """A ``--project``/``--model`` that matches nothing in the ledger; names what would."""


def of_ledger(read: Reader, relation: str, rng: Range, slot_scope: str | None, *,
              groups: ProjectGroups | None = None) -> Selection:
    """A selection over a ledger's ``relation``, using what that ledger's shape offers.

    The slot sums where the ledger keeps them (and their thresholds), the stored
    context column where it has one; ``groups``: which project a cwd belongs to.
    """
    tables = {r[0] for r in read("SELECT name FROM sqlite_master", [])}
    columns = {r[1] for r in read("PRAGMA table_info(requests)", [])}
    kept = "slots" in tables
    return Selection(read, relation, rng, slots=kept,
                     days={"slot_days", "slot_day_peaks"} <= tables,
                     slot_thresholds=slots.read_thresholds(read) if kept
                     else slots.DEFAULT_THRESHOLDS,
                     slot_scope=slot_scope,
                     context="context" if "context" in columns else CONTEXT_SQL,
                     groups=groups, unindexed="indexed" in columns)


def _basename(path: str) -> str:
    """The last part of a project path (``/home/u/proj`` → ``proj``)."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def _encoded(path: str) -> str:
    """Claude Code's directory name for a project (``/home/u/proj`` → ``-home-u-proj``)."""
    return "".join(c if c.isalnum() else "-" for c in path)


def resolve_projects(known: Iterable[str], names: Sequence[str],
                     project_of: Callable[[str], str] = str) -> tuple[str, ...]:
    """The working directories matching any name, as stored (``known``: the stored ones).

    A name is a project's path, its last part or its folder name (the project
    of a cwd is ``project_of(cwd)``: every cwd of the project matches), or the
    same of one working directory.
    """
    paths = sorted(set(known))
    projects = {p: project_of(p) for p in paths}
    out: list[str] = []
    for name in names:
        want = name.rstrip("/") or name
        hits = [p for p in paths if _names(want, projects[p]) or _names(want, p)]
        if not hits:
            raise FilterError(_no_match("--project", name,
                                        [_basename(p) for p in projects.values()]))
        out.extend(h for h in hits if h not in out)
    return tuple(out)


def _names(want: str, path: str) -> bool:
    """Whether ``want`` names the path: the path itself, its last part or its folder name."""
    return want in (path, path.rstrip("/"), _basename(path), _encoded(path))


def resolve_models(known: Iterable[str], names: Sequence[str]) -> tuple[str, ...]:
    """The model ids containing any name (case-insensitive): ``opus``, ``claude-sonnet-4-5``."""
    models = sorted(set(known))
    out: list[str] = []
    for name in names:
        hits = [m for m in models if name.lower() in m.lower()]
        if not hits:
            raise FilterError(_no_match("--model", name, models))
        out.extend(h for h in hits if h not in out)
    return tuple(out)


def _no_match(flag: str, name: str, choices: Sequence[str]) -> str:
    """A one-line message for a filter that matches nothing."""
    import difflib  # noqa: PLC0415 - only on this error path

    names = sorted(set(choices))
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    known = ", ".join(names[:8]) or "none yet"
    return f"{flag} {name!r} matches nothing in the ledger{hint} (known: {known})"


def known_values(selection: Selection, column: str) -> list[str]:
    """The distinct values of ``project`` or ``model`` in the scope (slot keys when kept).

    The keys of other roots' requests are not in the scope: the 16-day block
    sums (a few rows per key) say which keys the scope's roots hold.
    """
    if selection.slots and selection.slot_scope is None:
        return [r[0] for r in selection.read(f"SELECT DISTINCT {column} FROM slot_keys", [])]
    if selection.slots and selection.days:
        return [r[0] for r in selection.read(
            f"SELECT DISTINCT {column} FROM slot_keys WHERE id IN (SELECT key FROM slot_blocks "
            f"WHERE {selection.slot_scope})", [])]
    return [r[0] for r in selection.read(
        f"SELECT DISTINCT {column} FROM {selection.relation}", [])]


def ledger_models(selection: Selection) -> list[str]:
    """Every model of the ledger's requests (a superset of the scope's), from the counter rollups.

    The rollups hold a row per raw class (model first) of every request, kept
    in the same transaction as the rows: a few hundred rows to read, not the
    requests.
    """
    return [r[0] for r in selection.read("SELECT DISTINCT model FROM rollup_counts", [])]
