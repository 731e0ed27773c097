"""The ``serve`` command: its flags, and the daemon run until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from exporter.cli.assemble import daemon_parts
from exporter.cli.config import Settings, shown_default
from exporter.cli.pipeline import Environ, codex_homes, transcript_dirs

HELP = "follow the transcripts and serve /metrics"
DESCRIPTION = "Follow the transcripts and serve their metrics to Prometheus."
EPILOG = """\
examples:
  claude-code-exporter serve                          follow ~/.claude, serve 127.0.0.1:9477
  claude-code-exporter serve --demo                   generated sample sessions, live
  claude-code-exporter serve --budget-day-usd 50      daily budget for the alert rules

exit codes: 0 stopped by SIGTERM/SIGINT · 2 bad usage or configuration · 3 unusable ledger · \
70 internal error (a bug; restarted by the units)"""


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """The flags of `serve`, each with its default."""
    serve.add_argument("--listen", metavar="HOST:PORT",
                       help="where /metrics, /healthz and the page are served; beyond "
                            "loopback it logs a warning unless CLAUDE_CODE_EXPORTER_LISTEN_"
                            f"BEYOND_LOOPBACK=true (default: {shown_default('listen')})")
    serve.add_argument("--allowed-hosts", metavar="NAMES",
                       help="comma list of further Host names answered (a reverse proxy's, "
                            ".domain for a domain, * for any); other names get 421, see "
                            "docs/deploy.md (default: loopback names; beyond loopback also IP "
                            "literals, single-label names and this machine's name)")
    serve.add_argument("--project-label", choices=["basename", "full", "hash", "none"],
                       help="the project label: the path's last part, the whole path, a hash, "
                            f"or none (default: {shown_default('project_label')})")
    serve.add_argument("--project-grouping", choices=["folder", "cwd"],
                       help="what a project is: the project folder Claude Code keeps the "
                            "session in (worktrees of one repository are one project), or each "
                            f"working directory (default: {shown_default('project_grouping')})")
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
                       help=f"full rescan interval (default: {shown_default('rescan_seconds')})")
    serve.add_argument("--settle-seconds", type=float, metavar="S",
                       help="quiet time before a request enters the histograms "
                            f"(default: {shown_default('settle_seconds')})")
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
                       help=f"push interval (default: {shown_default('otlp_interval_seconds')})")
    serve.add_argument("--otlp-host", choices=["name", "hash", "none"],
                       help="resource host.name as is, hashed, or not at all "
                            f"(default: {shown_default('otlp_host')})")
    serve.add_argument("--otlp-user", choices=["name", "hash", "none"],
                       help="resource user: as is, hashed, or not at all "
                            f"(default: {shown_default('otlp_user')})")
    serve.add_argument("--prometheus-enabled", action=argparse.BooleanOptionalAction,
                       help="serve /metrics (--no-prometheus-enabled: OTLP push only) "
                            "(default: on)")


def run(args: argparse.Namespace, settings: Settings, log: Any, environ: Environ) -> int:
    """Run the daemon until SIGTERM/SIGINT."""
    # Imported here: OpenTelemetry and the watcher are no part of the other commands.
    from exporter.serve.daemon import Daemon

    # Only the demo needs a scratch directory: a container run with --read-only
    # has no writable /tmp, and serving must not depend on one.
    scratch = (tempfile.TemporaryDirectory(prefix="claude-code-exporter-demo-") if args.demo
               else contextlib.nullcontext(""))
    with scratch as tmp:
        if args.demo:
            settings = _demo_settings(settings, Path(tmp), log)
        parts = daemon_parts(settings, transcript_dirs(settings, environ),
                             warn=lambda line: log.warning("prices_not_updated", detail=line),
                             codex_homes=codex_homes(settings, environ))
        daemon = Daemon(parts, log)
        daemon.install_signals()
        daemon.start()
        if daemon.http is not None:  # the port bound (port 0 picks one)
            announce(page_url(parts.http.host, daemon.http.port,
                              tls=parts.http.tls is not None), log, metrics=parts.http.metrics)
        if args.demo:
            _start_live_demo(Path(tmp), daemon.stop_event)
        daemon.run()
    return 0


def page_url(host: str, port: int, *, tls: bool) -> str:
    """The page's address as a person types it: a wildcard bind is reached on loopback."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    if ":" in shown:  # an IPv6 literal goes in brackets
        shown = f"[{shown}]"
    return f"{'https' if tls else 'http'}://{shown}:{port}/"


def announce(url: str, log: Any, out: TextIO | None = None, *, metrics: bool = True) -> None:
    """Say where the page is: an INFO line for the log; on a terminal, a plain line too.

    Off a terminal (a service's journal, a container, a pipe) the log stays one
    JSON object per line. ``metrics``: /metrics is served (not OTLP only).
    """
    log.info("page", url=url)
    out = sys.stdout if out is None else out
    if out.isatty():
        scrape = f" (Prometheus: {url}metrics)" if metrics else ""
        print(f"claude-code-exporter: open {url} to see your usage{scrape}", file=out, flush=True)


def _demo_settings(settings: Settings, root: Path, log: Any) -> Settings:
    """Generate sample sessions ending now (a month of Claude Code's, two days of Codex's).

    The settings then follow both: the tree as a Claude Code root, its Codex home
    as a Codex home, so the page and /metrics show each agent's figures.
    """
    from exporter.synth.demo import history
    from exporter.synth.demo_codex import codex_history

    now = time.time()
    requests = history(root, now, seed=int(now) % 1000)
    home, truth = codex_history(root, now, seed=int(now) % 1000)
    log.info("demo", root=str(root), requests=requests, codex_home=str(home),
             codex_turns=truth["totals"]["requests"], codex_cost_usd=truth["totals"]["cost_usd"])
    return settings.model_copy(update={"data_dirs": [root], "codex_homes": [home],
                                       "state_dir": root / "state"})


def _start_live_demo(root: Path, stop: threading.Event) -> None:
    """Keep one demo session alive: a new request every few seconds until stop."""
    from exporter.synth.demo import LiveSession, run_live

    session = LiveSession(root, seed=int(time.time()))
    threading.Thread(target=run_live, args=(session, stop), name="demo", daemon=True).start()
