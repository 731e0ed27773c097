"""Command line: parses flags, builds the settings, wires the stages together.

Exit codes: 0 ok, 2 bad configuration or usage, 3 unusable ledger.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from exporter import __version__, report
from exporter.config import ConfigError, Settings, load_settings
from exporter.ingest.discover import default_roots, projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger import Ledger, LedgerError
from exporter.logs import make_logger
from exporter.progress import progress_bar
from exporter.projections import figures
from exporter.projections.pricing import Pricing

EXIT_CONFIG = 2
EXIT_LEDGER = 3


def _common(parser: argparse.ArgumentParser) -> None:
    """Flags every subcommand shares; each maps to a Settings field."""
    parser.add_argument("--config", type=Path, help="TOML settings file")
    parser.add_argument(
        "--data-dir", dest="data_dirs", action="append", type=Path, metavar="PATH",
        help="transcript root or projects/ dir; repeatable; replaces the default roots",
    )
    parser.add_argument("--state-dir", type=Path, help="where the ledger lives")
    parser.add_argument("--workers", type=int, help="parser processes for big scans")
    parser.add_argument("--batch-mb", type=float, help="commit to the ledger every N MB read")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["auto", "json", "console"])


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with all subcommands."""
    parser = argparse.ArgumentParser(
        prog="claude-code-exporter",
        description="Claude Code transcripts as exact, deduplicated usage metrics.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    report = sub.add_parser("report", help="ingest, then print a usage summary")
    _common(report)
    report.add_argument("--json", action="store_true", help="machine-readable output")
    report.add_argument("--since", type=_moment, help="ISO date/time (UTC) or age like 7d, 12h")
    report.add_argument("--until", type=_moment, help="ISO date/time (UTC) or age like 1d")

    serve = sub.add_parser("serve", help="follow the transcripts and serve /metrics")
    _common(serve)
    serve.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:9477)")
    serve.add_argument("--project-label", choices=["basename", "full", "hash", "none"])
    serve.add_argument("--budget-day-usd", type=float, help="daily budget, for alert rules")
    serve.add_argument("--budget-month-usd", type=float, help="monthly budget, for alert rules")
    serve.add_argument("--poll", action="store_const", const=True,
                       help="no file events: rescan every --rescan-seconds")
    serve.add_argument("--rescan-seconds", type=float, help="full rescan interval")
    serve.add_argument("--settle-seconds", type=float,
                       help="quiet time before a request enters the histograms")
    serve.add_argument("--tls-cert-file", type=Path)
    serve.add_argument("--tls-key-file", type=Path)
    serve.add_argument("--basic-auth-user",
                       help="require basic auth; the password comes from the config or "
                            "CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD, never a flag")
    serve.add_argument("--demo", action="store_true",
                       help="serve generated sample sessions from a temporary tree")
    # OTLP push (docs/teams.md); headers and extra resource attributes: config or env only
    serve.add_argument("--otlp-endpoint", metavar="URL",
                       help="also push to this OTLP/HTTP receiver, e.g. http://collector:4318")
    serve.add_argument("--otlp-interval-seconds", type=float, help="push interval (default 60)")
    serve.add_argument("--otlp-host", choices=["name", "hash", "none"],
                       help="resource host.name as is (default), hashed, or not at all")
    serve.add_argument("--otlp-user", choices=["name", "hash", "none"],
                       help="resource user: as is, hashed (default), or not at all")
    serve.add_argument("--prometheus-enabled", action=argparse.BooleanOptionalAction,
                       help="serve /metrics (--no-prometheus-enabled: OTLP push only)")

    _add_backfill(sub)

    gen = sub.add_parser("generate", help="write a synthetic transcript tree with ground truth")
    gen.add_argument("root", type=Path, help="directory to create (acts as ~/.claude)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--sessions", type=int, default=8)
    gen.add_argument("--target-mb", type=float, help="grow the tree to about this size")
    return parser


# ---- backfill (docs/backfill.md) -------------------------------------------------------
def _add_backfill(sub: Any) -> None:
    """The ``backfill`` subcommand: history as OpenMetrics for promtool."""
    bf = sub.add_parser("backfill", help="ingest, then write the ledger's history as "
                        "OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`")
    _common(bf)
    bf.add_argument("--output", "-o", type=Path, required=True, metavar="FILE")
    bf.add_argument("--step", type=_duration, default=60,
                    help="resolution: one boundary every STEP (default 1m)")
    bf.add_argument("--anchor", type=_duration, default=3600,
                    help="also write every series at each multiple of this, UTC (default 1h;"
                         " = --step for a dense file)")
    bf.add_argument("--since", type=_moment, help="first sample time (values stay cumulative)")
    bf.add_argument("--until", type=_moment,
                    help="last sample time (default now): where live scrapes begin")
    bf.add_argument("--label", action="append", type=_target_label, default=[],
                    metavar="NAME=VALUE",
                    help="target label on every series (default job=claude-code and "
                         "instance=the listen address; NAME= drops one); repeatable")
    bf.add_argument("--listen", help="HOST:PORT: the default instance label")
    bf.add_argument("--project-label", choices=["basename", "full", "hash", "none"])


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
# ---- end backfill ----------------------------------------------------------------------


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


def _settings(args: argparse.Namespace) -> Settings:
    """Settings from the flags that name settings, the environment and --config."""
    fields = set(Settings.model_fields)
    flags = {k: v for k, v in vars(args).items() if k in fields}
    return load_settings(flags, args.config)


def transcript_dirs(settings: Settings) -> list[Path]:
    """The projects directories to read: --data-dir, or every default root."""
    roots = settings.data_dirs or default_roots(os.environ, Path.home())
    return projects_dirs(roots)


def ingest(ledger: Ledger, settings: Settings, log: Any, *, show_progress: bool) -> None:
    """One ingestion pass into ``ledger`` (what `report` and `backfill` do first)."""
    scanner = Scanner(ledger, transcript_dirs(settings), workers=settings.workers, log=log,
                      batch_bytes=int(settings.batch_mb * 1024 * 1024),
                      max_line_bytes=settings.max_line_bytes)
    with progress_bar(enabled=show_progress and sys.stderr.isatty()) as progress:
        result = scanner.scan(progress=progress)
    log.info("scan_done", files=result.files, files_read=result.files_read,
             bytes_read=result.bytes_read, new_requests=result.new_requests,
             seconds=round(result.seconds, 3))


def cmd_report(args: argparse.Namespace, settings: Settings, log: Any) -> int:
    """Ingest what is new, then print the figures."""
    pricing = Pricing.load(settings.pricing)
    ledger = Ledger(settings.ledger_path)
    try:
        ingest(ledger, settings, log, show_progress=not args.json)
        since = args.since.timestamp() if args.since else None
        until = args.until.timestamp() if args.until else None
        result = figures.compute(
            ledger.requests(since, until), pricing,
            kv_bytes_per_token=settings.kv_bytes_per_token,
            upload_bytes_per_token=settings.upload_bytes_per_token,
            lines=ledger.counters("lines"), rejected=ledger.counters("rejected"),
        )
    finally:
        ledger.close()
    if args.json:
        sys.stdout.write(report.to_json(result) + "\n")
    else:
        from rich.console import Console

        report.render_text(result, Console())
    return 0


def cmd_serve(args: argparse.Namespace, settings: Settings, log: Any) -> int:
    """Run the daemon until SIGTERM/SIGINT."""
    # Imported here: OpenTelemetry and the watcher cost `report` 0.2 s of start-up.
    from exporter.serve.daemon import Daemon

    # Only the demo needs a scratch directory: a container run with --read-only
    # has no writable /tmp, and serving must not depend on one.
    scratch = (tempfile.TemporaryDirectory(prefix="claude-code-exporter-demo-") if args.demo
               else contextlib.nullcontext(""))
    with scratch as tmp:
        if args.demo:
            settings = _demo_settings(settings, Path(tmp), log)
        daemon = Daemon(settings, transcript_dirs(settings), log)
        daemon.install_signals()
        daemon.start()
        if args.demo:
            _start_live_demo(Path(tmp), daemon.stop_event)
        daemon.run()
    return 0


def _demo_settings(settings: Settings, root: Path, log: Any) -> Settings:
    """Generate about a day of sample sessions ending now, and point the settings at them."""
    from exporter.synth import GenOptions, generate

    start = datetime.now(UTC) - timedelta(hours=28)
    start = start.replace(microsecond=0)
    truth = generate(root, GenOptions(seed=int(time.time()) % 1000, start=start))
    log.info("demo", root=str(root), requests=truth["totals"]["requests"])
    return settings.model_copy(update={"data_dirs": [root], "state_dir": root / "state"})


def _start_live_demo(root: Path, stop: threading.Event) -> None:
    """Keep one demo session alive: a new request every few seconds until stop."""
    from exporter.synth.live import LiveSession, run_live

    session = LiveSession(root, seed=int(time.time()))
    threading.Thread(target=run_live, args=(session, stop), name="demo", daemon=True).start()


def cmd_backfill(args: argparse.Namespace, settings: Settings, log: Any) -> int:
    """Ingest what is new, then write the ledger's history as OpenMetrics text."""
    from exporter.projections.backfill import (
        DEFAULT_LABELS,
        BackfillError,
        BackfillOptions,
        write_history,
    )
    from exporter.serve.daemon import metrics_options

    pricing = Pricing.load(settings.pricing)
    ledger = Ledger(settings.ledger_path)
    try:
        ingest(ledger, settings, log, show_progress=True)
        requests = ledger.requests()
    finally:
        ledger.close()
    labels = {**DEFAULT_LABELS, "instance": settings.listen, **dict(args.label)}
    opts = BackfillOptions(
        step=args.step, anchor=args.anchor,
        since=args.since.timestamp() if args.since else None,
        until=args.until.timestamp() if args.until else None,
        labels={k: v for k, v in labels.items() if v},
    )
    partial = args.output.with_name(args.output.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as out:
            stats = write_history(requests, pricing, metrics_options(settings), out, opts)
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


def _utc(ts: float) -> str:
    """An epoch time as ISO-8601 UTC."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def cmd_generate(args: argparse.Namespace) -> int:
    """Write a synthetic tree (for demos, tests and benchmarks)."""
    from exporter.synth import GenOptions, generate

    target = int(args.target_mb * 1e6) if args.target_mb else None
    truth = generate(args.root, GenOptions(seed=args.seed, sessions=args.sessions,
                                           target_bytes=target))
    print(f"wrote {args.root} ({truth['totals']['requests']} requests); truth in "
          f"{args.root / 'truth.json'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``claude-code-exporter`` command."""
    args = build_parser().parse_args(argv)
    if args.command == "generate":
        return cmd_generate(args)
    try:
        settings = _settings(args)
    except ConfigError as exc:
        print(f"claude-code-exporter: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    log = make_logger(settings.log_level, settings.log_format)
    try:
        command = {"serve": cmd_serve, "backfill": cmd_backfill}.get(args.command, cmd_report)
        return command(args, settings, log)
    except LedgerError as exc:
        log.error("ledger_unusable", detail=str(exc))
        print(f"claude-code-exporter: {exc}", file=sys.stderr)
        return EXIT_LEDGER
    except ConfigError as exc:  # found at start-up: a busy port, an unreadable certificate
        print(f"claude-code-exporter: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ValueError as exc:  # e.g. a bad pricing override, found when it is loaded
        print(f"claude-code-exporter: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    raise SystemExit(main())
