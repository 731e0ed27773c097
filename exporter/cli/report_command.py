"""The `report` command: its flags, their checks, and one run of a view.

`report` ingests what is new, then prints the summary (no view) or one view —
daily, weekly, monthly, session, project, blocks, or per skill, plugin, MCP
server or agent (exporter.projections.attribution) — as a table, JSON or CSV,
over the requests that appeared under the transcript roots (``--data-dir`` or
the defaults), in the range and zone asked for; or `limits`, the plan windows
the status line recorded (the account's: the filters do not apply).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from exporter.cli.config import Settings
from exporter.cli.pipeline import (
    Environ,
    codex_homes,
    ingest,
    ingest_plan_samples,
    load_prices,
    transcript_dirs,
)
from exporter.cli.report_ledger import report_ledger
from exporter.ingest import discover
from exporter.ingest.formats import AGENTS
from exporter.ingest.scan import ScanResult
from exporter.ledger.store import Ledger
from exporter.projections import agents, attribution, caps, figures, views
from exporter.projections.class_prices import ClassPrices
from exporter.projections.json_text import to_json
from exporter.projections.periods import PeriodError, Range, local_zone, resolve_zone
from exporter.projections.project_groups import ProjectGroups, folders_of
from exporter.projections.range_check import checked
from exporter.projections.selection import (
    FilterError,
    Selection,
    known_values,
    ledger_models,
    of_ledger,
    resolve_models,
    resolve_projects,
)
from exporter.records import Source
from exporter.report import summary as report
from exporter.shown import visible

SUMMARY: Final = "summary"
LIMITS: Final = "limits"  # the status line's plan windows (docs/plan-limits.md)
EPILOG: Final = """\
examples:
  claude-code-exporter report                    summary of everything recorded
  claude-code-exporter report daily --since 7d   one row per day of the last week
  claude-code-exporter report blocks --json      5-hour blocks; the open one projected
  claude-code-exporter report limits             plan windows: used, resets, $ per 1 %

exit codes: 0 ok · 2 bad usage or configuration · 3 unusable ledger · 70 internal error (a bug)"""


HELP: Final = "ingest, then print a usage summary or a view"
DESCRIPTION: Final = "Ingest what is new, then print the usage summary or one view."


class UsageError(Exception):
    """A flag value that cannot be used (exit 2); the message says which and why."""


def run(args: argparse.Namespace, settings: Settings, log: Any, environ: Environ,
        now: float | None = None) -> int:
    """Ingest what is new, then print the summary or a view."""
    now = time.time() if now is None else now
    req = check(args, now, environ,
                warn=lambda detail: log.warning("timezone_not_understood", detail=detail))
    missing = missing_data_dirs(settings)
    if missing:
        raise UsageError(f"--data-dir {missing[0]} does not exist")
    dirs = transcript_dirs(settings, environ)
    pricing = load_prices(settings)
    # Beside a serve that does not follow ``dirs``: a private ledger (exporter.cli.report_ledger).
    with report_ledger(settings, pricing, dirs) as opened:
        ledger = opened.ledger
        # Absent default roots (say ~/.config/claude) are normal: read only those present.
        present = discover.present(dirs)
        scan = ScanResult(files=1) if not opened.writes else ingest(
            ledger, settings, log, present, show_progress=req.output == "text", quiet=True,
            codex=codex_homes(settings, environ))
        if opened.writes and not opened.private:
            ingest_plan_samples(settings, log)  # the status line's samples, as serve does
        agent = getattr(args, "agent", None)
        scoped = None if agent is None else agents.scope(ledger, dirs, agent)
        sel = selection(ledger, dirs, args, req.range, grouping=settings.project_grouping,
                        scoped=scoped)
        if empty(sel) and not scan.files and req.view != LIMITS:
            print(first_run_message(dirs, Path.home()),
                  file=sys.stderr if req.output != "text" else sys.stdout)
            if req.output == "text":
                return 0
        roots = list(dirs) if scoped is None else list(scoped.roots)
        # After the pass: every model a request read here can have is in the classes.
        prices = ClassPrices.of(pricing, ledger_models(sel))
        return show(req, sel, prices, settings=settings,
                    counters=lambda name: ledger.counters(name, roots), args=args, now=now,
                    found=({scoped.agent: scoped} if scoped is not None
                           else agents.scopes(ledger, dirs, sel)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `report` beyond the common ones."""
    parser.add_argument(
        "view", nargs="?", default=SUMMARY,
        choices=(SUMMARY, *views.VIEWS, *attribution.VIEWS, LIMITS),
        help="what to show: the summary (default), or a table per day, week (Monday "
             "first), month, session, project or 5-hour block, per skill, plugin, MCP "
             "server or agent the requests were made for, or the plan's 5-hour and "
             "weekly limits as the status line recorded them (limits)")
    parser.add_argument("--full", action="store_true",
                        help="the summary with every table: request shape, cache expiry, "
                             "sessions, estimates (default: the one-screen summary)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true",
                     help="print JSON (docs/figures.md has the shape) instead of tables "
                          "(default: tables)")
    out.add_argument("--csv", action="store_true",
                     help="print a view as CSV, one line per row (default: tables)")
    _add_selection_flags(parser)
    _add_view_flags(parser)


def _add_selection_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that choose the requests: the range, its zone, projects, models, sources."""
    parser.add_argument(
        "--since", metavar="WHEN",
        help="first moment covered: 2026-01-31, 20260131, 2026-01-31T09:00, today, "
             "yesterday or an age like 7d, 12h, 30m (default: the first request)")
    parser.add_argument(
        "--until", metavar="WHEN",
        help="end of the range, excluded; a date alone includes that whole day "
             "(default: no end)")
    parser.add_argument(
        "--timezone", metavar="ZONE",
        help="zone of days, weeks, months and times shown: an IANA name, UTC or +02:00 "
             f"(default: the system's, now {local_zone(os.environ).name})")
    parser.add_argument(
        "--project", action="append", default=[], metavar="NAME",
        help="only this project: its path, the path's last part or Claude Code's "
             "directory name for it; repeatable (default: every project)")
    parser.add_argument(
        "--project-grouping", choices=["folder", "cwd"],
        help="what a project is: Claude Code's project folder of the session (worktrees of a "
             "repository are one project) or each working directory (default: folder)")
    parser.add_argument(
        "--model", action="append", default=[], metavar="NAME",
        help="only models whose id contains NAME, e.g. opus; repeatable (default: every model)")
    parser.add_argument(
        "--source", action="append", default=[], choices=[s.label for s in Source],
        help="only requests of this source; repeatable (default: all three)")
    parser.add_argument(
        "--agent", choices=AGENTS,
        help="only the requests of this agent's logs: Claude Code's or Codex's (default: "
             "both, each on its own line or row where the roots hold both)")


def _add_view_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that shape a view's rows."""
    parser.add_argument(
        "--breakdown", action="store_true",
        help="views: a row per model inside each row (default: off)")
    parser.add_argument(
        "--breakdown-by", choices=attribution.BREAKDOWNS, metavar="WHAT",
        help="skill, plugin, mcp and agent views: split each row by model, effort or "
             "speed instead (implies --breakdown) (default: model)")
    parser.add_argument(
        "--limit", type=_count, metavar="N",
        help="views: show the first N rows only; totals still cover every row (default: all)")
    parser.add_argument(
        "--order", choices=views.ORDERS,
        help="views: row order, oldest or newest first, or most cost, requests or tokens "
             "first (default: newest for session, cost for project, oldest otherwise)")
    parser.add_argument(
        "--block-rule", choices=views.BLOCK_RULES, default=views.BLOCK_RULES[0],
        help="blocks: a block starts at the first request after the previous one ended "
             "(Anthropic's rule), or that time floored to the hour (ccusage's) "
             "(default: %(default)s)")


def _count(text: str) -> int:
    """A non-negative integer."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of rows (0 or more)")
    return value


@dataclass(frozen=True, slots=True)
class ReportQuery:
    """What one `report` run was asked for, checked."""

    view: str
    range: Range
    output: str  # "text", "json" or "csv"


def check(args: argparse.Namespace, now: float, env: Any = os.environ,
          warn: Callable[[str], None] | None = None) -> ReportQuery:
    """Check the flags that need more than argparse; raise UsageError naming the flag.

    ``warn`` hears about a ``TZ`` that is not understood (the days are then UTC's).
    """
    by = getattr(args, "breakdown_by", None)
    if by not in (None, "model") and args.view not in attribution.VIEWS:
        raise UsageError(f"--breakdown-by {by} needs an attribution view: report "
                         f"skill|plugin|mcp|agent --breakdown-by {by}")
    if args.view != SUMMARY and getattr(args, "full", False):
        raise UsageError(f"--full is the summary's: report --full (not report {args.view})")
    if args.view == SUMMARY:
        for flag, given in (("--csv", args.csv), ("--breakdown", args.breakdown or by),
                            ("--limit", args.limit is not None),
                            ("--order", args.order is not None)):
            if given:
                views_of = "|limits" if flag == "--csv" else ""  # limits has a CSV too
                raise UsageError(f"{flag} needs a view: report daily|weekly|monthly|session|"
                                 f"project|blocks|skill|plugin|mcp|agent{views_of} {flag}")
    if args.view == LIMITS:  # one row per window instance: nothing to split, cut or order
        for flag, given in (("--breakdown", args.breakdown or by),
                            ("--limit", args.limit is not None),
                            ("--order", args.order is not None)):
            if given:
                raise UsageError(f"{flag} does not apply to report limits (it lists every "
                                 "window instance in the range, by window and reset)")
    try:
        zone = resolve_zone(args.timezone, env, warn=warn)
        rng = checked(Range.parse(args.since, args.until, zone, now), args.since, args.until)
    except PeriodError as exc:
        raise UsageError(str(exc)) from None
    output = "json" if args.json else "csv" if args.csv else "text"
    return ReportQuery(args.view, rng, output)


def missing_data_dirs(settings: Settings) -> list[Path]:
    """Data directories that were given but do not exist."""
    return [d for d in settings.data_dirs if not d.exists()]


def first_run_message(dirs: Sequence[Path], home: Path) -> str:
    """One line for a first run: where we looked, and what to do."""
    def shown(p: Path) -> str:
        try:
            return "~/" + str(p.relative_to(home))
        except ValueError:
            return str(p)
    where = ", ".join(shown(d) for d in dirs) or "nowhere"
    return (f"No Claude Code transcripts or Codex sessions found in {where}. Use Claude Code "
            "first, point --data-dir at a directory of transcripts (--codex-home at a Codex "
            "home), or try `claude-code-exporter serve --demo`.")


def selection(ledger: Ledger, dirs: Sequence[Path], args: argparse.Namespace,
              rng: Range, grouping: str = "folder", *, scoped: agents.Scope | None = None
              ) -> Selection:
    """The requests `report` covers: the roots' scope, the range and the filters.

    ``grouping``: what a project is (exporter.projections.project_groups);
    ``scoped``: one agent's part of the roots (--agent), else all of them.
    """
    relation, cond = ((ledger.scope(list(dirs)), ledger.scope_filter(list(dirs)))
                      if scoped is None else (scoped.relation, scoped.slot_scope))
    base = of_ledger(ledger.read, relation, rng, cond,
                     groups=ProjectGroups(grouping, folders_of(ledger.read)))
    try:
        projects = (resolve_projects(known_values(base, "project"), args.project,
                                     base.project_of)
                    if args.project else ())
        models = resolve_models(known_values(base, "model"), args.model) if args.model else ()
    except FilterError as exc:  # it names the ledger's projects and models: transcript data
        raise UsageError(visible(str(exc))) from None
    sources = tuple(s for s in Source if s.label in args.source)
    return dataclasses.replace(base, projects=projects, models=models, sources=sources)


def empty(sel: Selection) -> bool:
    """Whether the scope holds no request at all (ignoring range and filters)."""
    return not sel.read(f"SELECT 1 FROM {sel.relation} LIMIT 1", [])


def show(req: ReportQuery, sel: Selection, prices: ClassPrices, *, settings: Settings,
         counters: Callable[[str], dict[str, int]], args: argparse.Namespace,
         now: float, found: Mapping[str, agents.Scope] | None = None) -> int:
    """Compute and print the summary or the view.

    ``found``: each agent's scope (exporter.projections.agents); with two, the
    summary has a line per agent and each row of a view is one agent's.
    """
    found = found or {}
    if req.view == SUMMARY:
        result = _summary(sel, prices, settings, counters, found)
        if req.output == "json":
            doc = result.to_json()
            doc["prices"] = prices.pricing.describe()
            sys.stdout.write(to_json(doc) + "\n")
        else:
            console = _console()
            full = getattr(args, "full", False)
            if full:
                report.render_text(result, console)
            else:  # what a person asks first, on one screen (exporter.report.glance)
                from exporter.report import glance

                budgets = {k: v for k, v in (("day", settings.budget_day_usd),
                                             ("month", settings.budget_month_usd))
                           if v is not None}
                glance.render(result, glance.glance(sel, prices, now, budgets), console)
            report.render_prices(result, prices.pricing, console, brief=not full)
        return 0
    if req.view == LIMITS:
        from exporter.report import tables as report_views  # rich, for tables only

        return report_views.run_limits(req.output, req.range, settings.ledger_path, prices, now)
    limit = args.limit
    if limit is None and req.output == "text":  # a table for people has a cap; JSON, CSV all
        limit = caps.view_rows(req.view)
    by = getattr(args, "breakdown_by", None)
    options = views.Options(order=args.order, limit=limit,
                            breakdown=args.breakdown or by is not None,
                            block_rule=args.block_rule, now=now)
    if req.view in attribution.VIEWS:
        return _attributed(req, _view(sel, found, options, attribution.DEFAULT_ORDER, (
            lambda s, o: attribution.build(req.view, s, prices, o, by or "model"))),
            by or "model")
    view = _view(sel, found, options, views.DEFAULT_ORDER.get(req.view, "oldest"),
                 lambda s, o: views.build(req.view, s, prices, o))
    from exporter.report import tables as report_views  # rich, for tables only

    if req.output == "json":
        sys.stdout.write(to_json(report_views.view_json(view)) + "\n")
    elif req.output == "csv":
        sys.stdout.write(report_views.view_csv(view))
    else:
        report_views.render_view(view, _console())
    return 0


def _summary(sel: Selection, prices: ClassPrices, settings: Settings,
             counters: Callable[[str], dict[str, int]],
             found: Mapping[str, agents.Scope]) -> figures.Summary:
    """The summary's figures; per agent where ``found`` holds two (exporter.projections.agents)."""
    result = figures.summary(
        sel, prices, kv_bytes_per_token=settings.kv_bytes_per_token,
        upload_bytes_per_token=settings.upload_bytes_per_token,
        lines=counters("lines"), rejected=counters("rejected"),
        iterations=counters("iterations"))
    return dataclasses.replace(result, by_agent=agents.by_agent(sel, found, prices),
                               cache_writes_measured=agents.all_measure_cache_writes(found))


def _view(sel: Selection, found: Mapping[str, agents.Scope], options: views.Options,
          order: str, build: Callable[[Selection, views.Options], views.View]) -> views.View:
    """The view over ``sel``; with two agents, a row per agent merged (views.merged)."""
    if len(found) < 2:  # one agent's (or none): as it was, saying what its logs lack
        return dataclasses.replace(build(sel, options),
                                   cache_writes_measured=agents.all_measure_cache_writes(found))
    whole = dataclasses.replace(options, limit=None)  # cut once, after the merge
    return views.merged(agents.split_view(lambda s: build(s, whole), sel, found), options, order)


def _attributed(req: ReportQuery, view: views.View, by: str) -> int:
    """Print an attribution view (exporter.report.attribution_tables)."""
    from exporter.report import attribution_tables as report_attribution  # rich, for tables only

    if req.output == "json":
        sys.stdout.write(to_json(report_attribution.view_json(view, by)) + "\n")
    elif req.output == "csv":
        sys.stdout.write(report_attribution.view_csv(view, by))
    else:
        report_attribution.render(view, _console(), by)
    return 0


def _console() -> Any:
    """The terminal console (rich picks width and colour)."""
    from rich.console import Console  # not needed for JSON

    return Console()
