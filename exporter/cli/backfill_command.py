"""The ``backfill`` command: the ledger's history as OpenMetrics text, or TSDB blocks via promtool.

docs/backfill.md: ingest what is new, then write every series ``serve``
would have exposed, and the plan limits the status line recorded, one sample
per ``--step``.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from exporter.cli.assemble import metrics_options
from exporter.cli.config import Settings, shown_default
from exporter.cli.exits import EXIT_CONFIG
from exporter.cli.pipeline import (
    Environ,
    codex_homes,
    ingest,
    ingest_plan_samples,
    load_prices,
    open_ledger,
    transcript_dirs,
)
from exporter.progress import progress_bar
from exporter.projections.pricing import RateTable
from exporter.projections.project_groups import folders_of

HELP = ("ingest, then write the ledger's history as OpenMetrics text for "
        "`promtool tsdb create-blocks-from openmetrics`")
DESCRIPTION = ("Ingest what is new, then write the ledger's history (serve's series, and the "
               "plan limits the status line recorded) as OpenMetrics text or, through "
               "promtool, as TSDB blocks for Prometheus (docs/backfill.md).")
EPILOG = """\
examples:
  claude-code-exporter backfill --blocks blocks/     TSDB blocks through promtool, for Prometheus
  claude-code-exporter backfill -o history.om        the text, for promtool on another machine
  claude-code-exporter backfill -o h.om --since 30d  only the last 30 days (values stay cumulative)

exit codes: 0 ok · 2 bad usage or configuration (or no promtool for --blocks) · 3 unusable ledger \
· 70 internal error (a bug)"""


def add_arguments(bf: argparse.ArgumentParser) -> None:
    """The flags of ``backfill`` beyond the common ones."""
    where = bf.add_mutually_exclusive_group(required=True)
    where.add_argument("--output", "-o", type=Path, metavar="FILE",
                       help="the OpenMetrics file to write (default: none; this or --blocks is "
                            "required)")
    where.add_argument("--blocks", type=Path, metavar="DIR",
                       help="run promtool (on PATH) to write TSDB blocks into DIR, one block "
                            "at a time, no big file (default: none)")
    bf.add_argument("--step", type=_duration, default=60, metavar="DURATION",
                    help="resolution: one sample time every DURATION, e.g. 30s, 1m, 1h "
                         "(default: 1m)")
    bf.add_argument("--anchor", type=_duration, default=3600, metavar="DURATION",
                    help="also write a series at each multiple of this, UTC, within a day of "
                         "one of its changes (default: 1h)")
    bf.add_argument("--since", type=_moment, metavar="WHEN",
                    help="first sample time: an ISO date or date-time (UTC unless it has an "
                         "offset) or an age like 30d, 12h, 30m; values stay cumulative "
                         "(default: the first request)")
    bf.add_argument("--until", type=_moment, metavar="WHEN",
                    help="last sample time, as --since: where live scrapes begin "
                         "(default: now)")
    bf.add_argument("--label", action="append", type=_target_label, default=[],
                    metavar="NAME=VALUE",
                    help="target label on every series (default job=claude-code and "
                         "instance=the listen address; NAME= drops one); repeatable")
    bf.add_argument("--listen", metavar="HOST:PORT", help="the default instance label "
                    f"(default: {shown_default('listen')})")
    bf.add_argument("--project-label", choices=["basename", "full", "hash", "none"],
                    help=f"as for serve (default: {shown_default('project_label')})")
    bf.add_argument("--project-grouping", choices=["folder", "cwd"],
                    help=f"as for serve (default: {shown_default('project_grouping')})")
    bf.add_argument("--compat", action="append", choices=["native", "genai"],
                    help="as for serve: also write those families (default: neither)")


def _duration(text: str) -> int:
    """Whole seconds from ``30s``, ``1m``, ``1h`` or ``1d``."""
    m = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if not m or int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 1m, 1h, 1d")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _target_label(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` with a Prometheus label name that is not reserved (``__``)."""
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name) or name.startswith("__"):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE with a label name")
    return name, value


def _moment(text: str) -> datetime:
    """An ISO-8601 date/time (naive = UTC) or an age such as ``7d``/``12h``/``30m``."""
    age = re.fullmatch(r"(\d+)([dhm])", text.strip())
    if age:
        unit = {"d": "days", "h": "hours", "m": "minutes"}[age.group(2)]
        return datetime.now(UTC) - timedelta(**{unit: int(age.group(1))})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO date/time or an age") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def run(args: argparse.Namespace, settings: Settings, log: Any, environ: Environ) -> int:
    """Ingest what is new, then write the ledger's history as OpenMetrics text."""
    from exporter.projections.backfill import DEFAULT_LABELS, BackfillOptions, serve_samples
    from exporter.projections.plan.windows import plan_history

    if args.blocks is not None and shutil.which("promtool") is None:
        print("claude-code-exporter: --blocks needs promtool on PATH (Debian: apt-get install "
              "prometheus); or write a file with --output", file=sys.stderr)
        return EXIT_CONFIG
    pricing = load_prices(settings)
    dirs = transcript_dirs(settings, environ)
    metrics = metrics_options(settings)
    ledger = open_ledger(settings, pricing, dirs, "backfill")
    try:
        if not ledger.readonly:
            ingest(ledger, settings, log, dirs, show_progress=True,
                   codex=codex_homes(settings, environ))
            ingest_plan_samples(settings, log)  # the status line's samples, as serve does
        requests = ledger.requests(view=ledger.scope(dirs))
        # The replay groups projects by the folders serve's projection knows (below).
        metrics = dataclasses.replace(metrics, project_folders=frozenset(folders_of(ledger.read)))
        serve = serve_samples(ledger, pricing, metrics, dirs)
        plan = plan_history(ledger.read)  # the status line's samples (docs/plan-limits.md)
    finally:
        ledger.close()
    labels = {**DEFAULT_LABELS, "instance": settings.listen, **dict(args.label)}
    opts = BackfillOptions(
        step=args.step, anchor=args.anchor,
        since=args.since.timestamp() if args.since else None,
        until=args.until.timestamp() if args.until else None,
        labels={k: v for k, v in labels.items() if v},
    )
    if args.blocks is not None:
        return _backfill_blocks(args, requests, pricing=pricing, metrics=metrics, opts=opts,
                                serve=serve, plan=plan)
    return _backfill_file(args, log, requests, pricing=pricing, metrics=metrics, opts=opts,
                          serve=serve, plan=plan)


def _backfill_file(args: argparse.Namespace, log: Any, requests: Any, *, pricing: RateTable,
                   metrics: Any, opts: Any, serve: Any, plan: Any) -> int:
    """``backfill -o FILE``: the OpenMetrics text, written beside and moved in when complete."""
    from exporter.projections.backfill import BackfillError, write_history

    partial = args.output.with_name(args.output.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as out:
            stats = write_history(requests, pricing, metrics, out, opts, serve=serve, plan=plan)
        partial.replace(args.output)
    except BackfillError as exc:
        print(f"claude-code-exporter: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    finally:
        partial.unlink(missing_ok=True)  # gone already unless something failed
    log.info("backfill_done", output=str(args.output), requests=stats.requests,
             series=stats.series, samples=stats.samples, first=stats.first, last=stats.last)
    span = ("no samples" if stats.first is None else
            f"{_utc(stats.first)} .. {_utc(stats.last or stats.first)}")
    print(f"wrote {args.output}: {stats.samples} samples of {stats.series} series, {span}\n"
          f"next: promtool tsdb create-blocks-from openmetrics --max-block-duration=744h "
          f"{args.output} BLOCKS_DIR  (docs/backfill.md)")
    return 0


def _backfill_blocks(args: argparse.Namespace, requests: Any, *, pricing: RateTable,
                     metrics: Any, opts: Any, serve: Any, plan: Any) -> int:
    """``backfill --blocks DIR``: promtool turns the history into blocks, chunk by chunk."""
    from exporter.projections.backfill import BackfillError, write_blocks

    promtool = shutil.which("promtool") or "promtool"  # checked before ingesting
    try:
        with progress_bar(sys.stderr.isatty(), "writing blocks", "steps") as progress:
            stats = write_blocks(requests, pricing, metrics, args.blocks, opts,
                                 promtool=promtool, serve=serve, workdir=args.blocks.parent,
                                 progress=progress, plan=plan)
    except BackfillError as exc:
        print(f"claude-code-exporter: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    span = ("no samples" if stats.first is None else
            f"{_utc(stats.first)} .. {_utc(stats.last or stats.first)}")
    print(f"wrote blocks into {args.blocks}: {stats.samples} samples of {stats.series} series, "
          f"{span}\nnext: move them into Prometheus's data directory (docs/backfill.md)")
    return 0


def _utc(ts: float) -> str:
    """An epoch time as ISO-8601 UTC."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
