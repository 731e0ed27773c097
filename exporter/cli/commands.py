"""Command line: parses flags, builds the settings, wires the stages together.

Exit codes: 0 ok, 2 bad configuration or usage, 3 unusable ledger, 70 internal error. A mistyped
option or choice is answered with the nearest valid one (:mod:`exporter.cli.argv`);
`report` itself lives in :mod:`exporter.cli.report_command`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import exporter
from exporter.cli import report_command as report_cli
from exporter.cli.argv import Parser
from exporter.cli.assemble import daemon_parts, metrics_options, scan_options
from exporter.cli.config import ConfigError, Settings, load_settings
from exporter.cli.logs import make_logger
from exporter.ingest import discover
from exporter.ingest.headstart import HeadStart
from exporter.ingest.scan import ScanResult
from exporter.ledger.store import Ledger, LedgerError
from exporter.progress import progress_bar
from exporter.projections.class_prices import ClassPrices
from exporter.projections.instruments import MetricsDisabledError
from exporter.projections.pricing import Pricing, load_pricing

Environ = Mapping[str, str]
"""The process's environment, read once by :func:`main` and handed down."""

EXIT_CONFIG = 2
EXIT_LEDGER = 3
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug, never a configuration error (restarted by systemd)


SERVE_EPILOG = """\
examples:
  claude-code-exporter serve                          follow ~/.claude, serve 127.0.0.1:9477
  claude-code-exporter serve --demo                   generated sample sessions, live
  claude-code-exporter serve --budget-day-usd 50      daily budget for the alert rules

exit codes: 0 stopped by SIGTERM/SIGINT · 2 bad usage or configuration · 3 unusable ledger · \
70 internal error (a bug; restarted by the units)"""

BACKFILL_EPILOG = """\
examples:
  claude-code-exporter backfill --blocks blocks/     TSDB blocks through promtool, for Prometheus
  claude-code-exporter backfill -o history.om        the text, for promtool on another machine
  claude-code-exporter backfill -o h.om --since 30d  only the last 30 days (values stay cumulative)

exit codes: 0 ok · 2 bad usage or configuration (or no promtool for --blocks) · 3 unusable ledger \
· 70 internal error (a bug)"""


def _default(name: str) -> str:
    """A setting's default as help text shows it."""
    value = Settings.model_fields[name].get_default(call_default_factory=True)
    return "none" if value is None else str(value)


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked (5-10 ms of metadata)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default,
                         help=help or "show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        """Print the version, as argparse's own version action does, and exit 0."""
        print(exporter.__version__)
        parser.exit()


def _common(parser: argparse.ArgumentParser) -> None:
    """Flags every subcommand shares; each maps to a Settings field."""
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="TOML settings file; flags and environment win over it "
                             "(default: none)")
    parser.add_argument(
        "--data-dir", dest="data_dirs", action="append", type=Path, metavar="PATH",
        help="transcript root or projects/ dir; repeatable; replaces the default roots "
             "(default: $CLAUDE_CONFIG_DIR, ~/.claude and $XDG_CONFIG_HOME/claude, "
             "else ~/.config/claude)",
    )
    parser.add_argument("--state-dir", type=Path, metavar="DIR",
                        help="where the ledger lives (default: $XDG_STATE_HOME/"
                             "claude-code-exporter, else ~/.local/state/claude-code-exporter)")
    parser.add_argument("--update-prices", action="store_true", default=None,
                        help="fetch the newest genai-prices data for this run (needs network; "
                             "without it the installed data is used) (default: off)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="parser processes for big scans (default: CPU count, at most 8)")
    parser.add_argument("--batch-mb", type=float, metavar="MB",
                        help=f"commit to the ledger every MB read (default: "
                             f"{_default('batch_mb')})")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        help=f"log verbosity (default: {_default('log_level')})")
    parser.add_argument("--log-format", choices=["auto", "json", "console"],
                        help="auto: console on a terminal, JSON otherwise (default: auto)")


def build_parser() -> Parser:
    """The argument parser with all subcommands."""
    parser = Parser(
        prog="claude-code-exporter",
        description="Claude Code transcripts as exact, deduplicated usage metrics.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    rep = parser.add_command(
        sub, "report", help="ingest, then print a usage summary or a view",
        description="Ingest what is new, then print the usage summary or one view.",
        epilog=report_cli.EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(rep)
    report_cli.add_arguments(rep)

    serve = parser.add_command(
        sub, "serve", help="follow the transcripts and serve /metrics",
        description="Follow the transcripts and serve their metrics to Prometheus.",
        epilog=SERVE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(serve)
    _serve_arguments(serve)

    _add_backfill(parser, sub)
    _common(parser.add_command(
        sub, "rebuild", help="move a corrupt ledger aside and read the transcripts again",
        description="Move the ledger's files aside (kept beside it, never deleted), then read "
                    "every transcript still on disk into a new ledger. Requests whose "
                    "transcripts are gone are not in the new one (docs/reliability.md)."))

    # Listed for --help only: main() hands `statusline` over before parsing (exporter.cli.entry
    # does the same without importing this module, which is the fast path).
    parser.add_command(sub, "statusline", add_help=False,
                       help="Claude Code's statusLine command: record the plan-limit figures, "
                            "print one line (docs/plan-limits.md)")

    gen = parser.add_command(
        sub, "generate", help="write a synthetic transcript tree with ground truth",
        description="Write a synthetic Claude Code transcript tree and truth.json, the totals "
                    "`report --json` must give for it (for demos, tests and benchmarks).")
    gen.add_argument("root", type=Path, help="directory to create (acts as ~/.claude)")
    gen.add_argument("--seed", type=int, default=0, metavar="N",
                     help="random seed: the same seed writes the same tree (default: %(default)s)")
    gen.add_argument("--sessions", type=int, default=8, metavar="N",
                     help="sessions to write (default: %(default)s)")
    gen.add_argument("--target-mb", type=float, metavar="MB",
                     help="grow the tree to about this size (default: as the sessions make it)")
    return parser


def _serve_arguments(serve: argparse.ArgumentParser) -> None:
    """The flags of `serve`, each with its default."""
    serve.add_argument("--listen", metavar="HOST:PORT",
                       help="where /metrics, /healthz and the page are served; beyond "
                            "loopback it logs a warning unless CLAUDE_CODE_EXPORTER_LISTEN_"
                            f"BEYOND_LOOPBACK=true (default: {_default('listen')})")
    serve.add_argument("--allowed-hosts", metavar="NAMES",
                       help="comma list of further Host names answered (a reverse proxy's, "
                            ".domain for a domain, * for any); other names get 421, see "
                            "docs/deploy.md (default: loopback names; beyond loopback also IP "
                            "literals, single-label names and this machine's name)")
    serve.add_argument("--project-label", choices=["basename", "full", "hash", "none"],
                       help="the project label: the path's last part, the whole path, a hash, "
                            f"or none (default: {_default('project_label')})")
    serve.add_argument("--budget-day-usd", type=float, metavar="USD",
                       help="daily budget, for the alert rules (default: none)")
    serve.add_argument("--budget-month-usd", type=float, metavar="USD",
                       help="monthly budget, for the alert rules (default: none)")
    serve.add_argument("--compat", action="append", choices=["native", "genai"],
                       help="also emit Claude Code's own metric names (native) or the "
                            "OpenTelemetry GenAI token histogram (genai); repeatable "
                            "(default: neither; docs/compat.md)")
    serve.add_argument("--poll", action="store_const", const=True,
                       help="no file events: rescan every --rescan-seconds (default: off)")
    serve.add_argument("--rescan-seconds", type=float, metavar="S",
                       help=f"full rescan interval (default: {_default('rescan_seconds')})")
    serve.add_argument("--settle-seconds", type=float, metavar="S",
                       help="quiet time before a request enters the histograms "
                            f"(default: {_default('settle_seconds')})")
    serve.add_argument("--tls-cert-file", type=Path, metavar="FILE",
                       help="serve HTTPS with this certificate (with --tls-key-file) "
                            "(default: plain HTTP)")
    serve.add_argument("--tls-key-file", type=Path, metavar="FILE",
                       help="the certificate's private key (default: none)")
    serve.add_argument("--basic-auth-user", metavar="NAME",
                       help="require basic auth; the password comes from the config or "
                            "CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD, never a flag "
                            "(default: no auth)")
    serve.add_argument("--demo", action="store_true",
                       help="serve generated sample sessions from a temporary tree "
                            "(default: off)")
    # OTLP push (docs/teams.md); headers and extra resource attributes: config or env only
    serve.add_argument("--otlp-endpoint", metavar="URL",
                       help="also push to this OTLP/HTTP receiver, e.g. http://collector:4318 "
                            "(default: no push)")
    serve.add_argument("--otlp-interval-seconds", type=float, metavar="S",
                       help=f"push interval (default: {_default('otlp_interval_seconds')})")
    serve.add_argument("--otlp-host", choices=["name", "hash", "none"],
                       help="resource host.name as is, hashed, or not at all "
                            f"(default: {_default('otlp_host')})")
    serve.add_argument("--otlp-user", choices=["name", "hash", "none"],
                       help="resource user: as is, hashed, or not at all "
                            f"(default: {_default('otlp_user')})")
    serve.add_argument("--prometheus-enabled", action=argparse.BooleanOptionalAction,
                       help="serve /metrics (--no-prometheus-enabled: OTLP push only) "
                            "(default: on)")


# ---- backfill (docs/backfill.md) -------------------------------------------------------
def _add_backfill(parser: Parser, sub: Any) -> None:
    """The ``backfill`` subcommand: history as OpenMetrics for promtool."""
    bf = parser.add_command(
        sub, "backfill", help="ingest, then write the ledger's history as "
        "OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`",
        description="Ingest what is new, then write the ledger's history (serve's series, "
                    "and the plan limits the status line recorded) as OpenMetrics text or, "
                    "through promtool, as TSDB blocks for Prometheus (docs/backfill.md).",
        epilog=BACKFILL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(bf)
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
                    f"(default: {_default('listen')})")
    bf.add_argument("--project-label", choices=["basename", "full", "hash", "none"],
                    help=f"as for serve (default: {_default('project_label')})")
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


def _settings(args: argparse.Namespace, environ: Environ) -> Settings:
    """Settings from the flags that name settings, the environment and --config."""
    fields = set(Settings.model_fields)
    flags = {k: v for k, v in vars(args).items() if k in fields}
    return load_settings(flags, environ, args.config)


def transcript_dirs(settings: Settings, environ: Environ) -> list[Path]:
    """The projects directories to read: --data-dir, or every default root."""
    return discover.transcript_dirs(settings.data_dirs, environ, Path.home())


def ingest(ledger: Ledger, settings: Settings, log: Any, dirs: Sequence[Path], *,
           show_progress: bool, quiet: bool = False,
           head_start: HeadStart | None = None) -> ScanResult:
    """One ingestion pass over ``dirs`` into ``ledger`` (what `report` and `backfill` do first).

    ``quiet`` logs the pass at DEBUG (a terminal report is its own summary of the pass);
    ``head_start``: its parsing begun already, if it fits (exporter.ingest.headstart).
    """
    scanner = scan_options(settings).scanner(ledger, dirs, log=log, head_start=head_start)
    with progress_bar(enabled=show_progress and sys.stderr.isatty()) as progress:
        result = scanner.scan(progress=progress)
    (log.debug if quiet else log.info)(
        "scan_done", files=result.files, files_read=result.files_read,
        bytes_read=result.bytes_read, new_requests=result.new_requests,
        seconds=round(result.seconds, 3))
    return result


def ingest_plan_samples(settings: Settings, log: Any) -> None:
    """Move the status line's new samples into the ledger (``report``/``backfill`` as the writer).

    A failure (a locked or full disk) is logged and the command goes on: the
    samples stay in the spool for the next run (docs/plan-limits.md).
    """
    from exporter.ledger.plan_store import ingest_spool
    from exporter.sqlite import sqlite3

    try:
        done = ingest_spool(settings.ledger_path, settings.state_dir)
    except (OSError, sqlite3.Error) as exc:
        log.warning("plan_samples_not_ingested", detail=str(exc))
        return
    log.debug("plan_samples_ingested", new=done.new, repeated=done.repeated,
              bytes_read=done.bytes_read)


def open_ledger(settings: Settings, pricing: Pricing, dirs: Sequence[Path],
                role: str = "report") -> Ledger:
    """The ledger, keeping its rollups by the counting rules ``serve`` uses.

    Beside a running ``serve`` it is a reader of serve's ledger (``readonly``):
    nothing is ingested, serve does that (exporter.ledger.access.open_ledger).
    """
    from exporter.ledger.access import open_ledger as open_for
    from exporter.projections.counting import Counting

    rules = Counting(pricing, settings.kv_bytes_per_token, settings.upload_bytes_per_token)
    ledger = open_for(settings.ledger_path, role, [str(d) for d in dirs], rules=rules,
                      settle_seconds=settings.settle_seconds)
    if ledger.readonly and ledger.holder is not None:
        followed = {os.path.abspath(r) for r in ledger.holder.roots}
        unread = [str(d) for d in dirs if os.path.abspath(d) not in followed and d.is_dir()]
        print(f"claude-code-exporter: serve (pid {ledger.holder.pid}) is following the "
              f"transcripts; reporting from its ledger without reading them"
              + (f" ({', '.join(unread)} not followed by it: not read)" if unread else ""),
              file=sys.stderr)
    return ledger


def cmd_report(args: argparse.Namespace, settings: Settings, log: Any, environ: Environ,
               now: float | None = None, *, head_start: HeadStart | None = None) -> int:
    """Ingest what is new, then print the summary or a view (``head_start``: see :func:`main`)."""
    now = time.time() if now is None else now
    req = report_cli.check(args, now, environ,
                           warn=lambda detail: log.warning("timezone_not_understood",
                                                           detail=detail))
    missing = report_cli.missing_data_dirs(settings)
    if missing:
        raise report_cli.UsageError(f"--data-dir {missing[0]} does not exist")
    dirs = transcript_dirs(settings, environ)
    pricing = _pricing(settings)
    ledger = open_ledger(settings, pricing, dirs)
    try:
        # Absent default roots (say ~/.config/claude) are normal: read only those present.
        present = discover.present(dirs)
        scan = ScanResult(files=1) if ledger.readonly else ingest(
            ledger, settings, log, present, show_progress=req.output == "text", quiet=True,
            head_start=head_start)
        if not ledger.readonly:
            ingest_plan_samples(settings, log)  # the status line's samples, as serve does
        sel = report_cli.selection(ledger, dirs, args, req.range)
        if report_cli.empty(sel) and not scan.files and req.view != report_cli.LIMITS:
            print(report_cli.first_run_message(dirs, Path.home()),
                  file=sys.stderr if req.output != "text" else sys.stdout)
            if req.output == "text":
                return 0
        return report_cli.run(req, sel, ClassPrices.of(pricing), settings=settings,
                              counters=ledger.counters, args=args, now=now)
    finally:
        ledger.close()


def _pricing(settings: Settings) -> Pricing:
    """The prices of this run (``--update-prices`` fetches the newest, if it can)."""
    try:
        return load_pricing(settings.pricing, update=settings.update_prices,
                            warn=lambda line: print(f"claude-code-exporter: {line}",
                                                    file=sys.stderr))
    except ValueError as exc:  # overrides that do not fit the (updated) price data
        raise ConfigError(f"invalid configuration: pricing: {exc}") from exc


def cmd_serve(args: argparse.Namespace, settings: Settings, log: Any, environ: Environ) -> int:
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
        parts = daemon_parts(settings, transcript_dirs(settings, environ),
                             warn=lambda line: log.warning("prices_not_updated", detail=line))
        daemon = Daemon(parts, log)
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
    from exporter.synth.demo import LiveSession, run_live

    session = LiveSession(root, seed=int(time.time()))
    threading.Thread(target=run_live, args=(session, stop), name="demo", daemon=True).start()


def cmd_backfill(args: argparse.Namespace, settings: Settings, log: Any,
                 environ: Environ) -> int:
    """Ingest what is new, then write the ledger's history as OpenMetrics text."""
    from exporter.projections.backfill import (
        DEFAULT_LABELS,
        BackfillError,
        BackfillOptions,
        serve_samples,
        write_history,
    )
    from exporter.projections.plan.windows import plan_history

    if args.blocks is not None and shutil.which("promtool") is None:
        print("claude-code-exporter: --blocks needs promtool on PATH (Debian: apt-get install "
              "prometheus); or write a file with --output", file=sys.stderr)
        return EXIT_CONFIG
    pricing = _pricing(settings)
    dirs = transcript_dirs(settings, environ)
    metrics = metrics_options(settings)
    ledger = open_ledger(settings, pricing, dirs, "backfill")
    try:
        if not ledger.readonly:
            ingest(ledger, settings, log, dirs, show_progress=True)
            ingest_plan_samples(settings, log)  # the status line's samples, as serve does
        requests = ledger.requests(view=ledger.scope(dirs))
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


def _backfill_blocks(args: argparse.Namespace, requests: Any, *, pricing: Pricing, metrics: Any,
                     opts: Any, serve: Any, plan: Any = None) -> int:
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


def cmd_rebuild(args: argparse.Namespace, settings: Settings, log: Any,
                environ: Environ) -> int:
    """Move the ledger aside, then ingest every transcript on disk into a new one."""
    from exporter.ledger.rebuild import move_aside

    aside = move_aside(settings.ledger_path, time.time())
    dirs = transcript_dirs(settings, environ)
    ledger = open_ledger(settings, _pricing(settings), dirs, "rebuild")
    try:
        scan = ingest(ledger, settings, log, discover.present(dirs), show_progress=True)
        ingest_plan_samples(settings, log)
        count = ledger.count()
    finally:
        ledger.close()
    print(f"claude-code-exporter: the old ledger's files are in {aside}; the new ledger holds "
          f"{count} requests from {scan.files} transcripts on disk (requests whose transcripts "
          "are gone are only in the old files)", file=sys.stderr)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    """Write a synthetic tree (for demos, tests and benchmarks)."""
    from exporter.synth import GenOptions, generate

    target = int(args.target_mb * 1e6) if args.target_mb else None
    truth = generate(args.root, GenOptions(seed=args.seed, sessions=args.sessions,
                                           target_bytes=target))
    print(f"wrote {args.root} ({truth['totals']['requests']} requests); truth in "
          f"{args.root / 'truth.json'}")
    return 0


def main(argv: Sequence[str] | None = None, environ: Environ | None = None, *,
         head_start: HeadStart | None = None) -> int:
    """Entry point of the ``claude-code-exporter`` command (``environ``: default os.environ).

    ``head_start``: a report's parsing begun before this was imported
    (exporter.cli.early): the report's pass takes it over if it fits; whatever
    happens, it is stopped before this returns.
    """
    try:
        return _main(argv, environ, head_start)
    finally:
        if head_start is not None:
            head_start.stop()  # (a no-op once the pass took it over)


def _main(argv: Sequence[str] | None, environ: Environ | None,
          head_start: HeadStart | None) -> int:
    """:func:`main`'s work."""
    words = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if environ is None else environ
    if words[:1] == ["statusline"]:
        from exporter.cli import statusline

        return statusline.main(words[1:], sys.stdin.buffer, sys.stdout.buffer, env)
    args = build_parser().parse_args(words)
    if args.command == "generate":
        return cmd_generate(args)
    try:
        settings = _settings(args, env)
    except ConfigError as exc:
        print(f"claude-code-exporter: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    log = make_logger(settings.log_level, settings.log_format)
    command = {"serve": cmd_serve, "backfill": cmd_backfill, "rebuild": cmd_rebuild}.get(
        args.command, functools.partial(cmd_report, head_start=head_start))
    try:
        return command(args, settings, log, env)
    except Exception as exc:  # every failure gets its code and message (_failed)
        return _failed(args.command, exc, log)


def _failed(command: str, exc: Exception, log: Any) -> int:
    """Say why a command could not run; return its exit code.

    Only what is known to be configuration is exit 2, which the systemd units
    do not restart (``RestartPreventExitStatus``): anything else, a ValueError
    from ingestion included, is :data:`EXIT_INTERNAL`, logged with its
    traceback, and restarted.
    """
    if isinstance(exc, report_cli.UsageError):
        message = f"claude-code-exporter {command}: error: {exc}"
    elif isinstance(exc, LedgerError):
        log.error("ledger_unusable", detail=str(exc))
        print(f"claude-code-exporter: {exc}", file=sys.stderr)
        return EXIT_LEDGER
    # Found at start-up: a busy port, a bad certificate, an environment that switches metrics off.
    elif isinstance(exc, ConfigError | MetricsDisabledError):
        message = f"claude-code-exporter: {exc}"
    else:
        log.error("command_failed", command=command, error=type(exc).__name__,
                  detail=str(exc), exc_info=exc)
        print(f"claude-code-exporter {command}: internal error: {type(exc).__name__}: {exc} "
              "(a bug: please report it with the log above)", file=sys.stderr)
        return EXIT_INTERNAL
    print(message, file=sys.stderr)
    return EXIT_CONFIG


if __name__ == "__main__":
    from exporter.cli.entry import run

    run(main)  # as the process's whole job (exporter.cli.entry.run)
