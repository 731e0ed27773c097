"""The command line: the flags every command shares, the parser, and which command runs.

Each command lives in its own module (report, serve and backfill:
``exporter.cli.*_command``; rebuild and generate, a few lines each, here);
what they share is in :mod:`exporter.cli.pipeline`. A mistyped option or
choice is answered with the nearest valid one (:mod:`exporter.cli.argv`).
Exit codes: :mod:`exporter.cli.exits`. ``statusline`` never comes here: the
console script (:mod:`exporter.cli.entry`) runs it without these imports.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import exporter
from exporter.cli import backfill_command, report_command, serve_command
from exporter.cli.argv import Parser
from exporter.cli.config import Settings, load_settings, shown_default
from exporter.cli.exits import EXIT_CONFIG, EXIT_INTERNAL, EXIT_LEDGER
from exporter.cli.logs import make_logger
from exporter.cli.pipeline import (
    Environ,
    codex_homes,
    ingest,
    ingest_plan_samples,
    load_prices,
    open_ledger,
    transcript_dirs,
)
from exporter.errors import ConfigError
from exporter.ingest import discover
from exporter.ledger.store import LedgerError
from exporter.projections.instruments import MetricsDisabledError

# The commands that take the settings, each a module with HELP, DESCRIPTION, EPILOG,
# add_arguments(parser) and run(args, settings, log, environ).
_COMMANDS: dict[str, Any] = {"report": report_command, "serve": serve_command,
                             "backfill": backfill_command}


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked (package metadata)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default,
                         help=help or "show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        """Print the version, as argparse's own version action does, and exit 0."""
        print(exporter.__version__)
        parser.exit()


def _shared_flags(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument(
        "--codex-home", dest="codex_homes", action="append", type=Path, metavar="PATH",
        help="an OpenAI Codex CLI home (its sessions/ and archived_sessions/ are read); "
             "repeatable (default: $CODEX_HOME, a comma list, else ~/.codex; with --data-dir, "
             "the Codex homes among those)",
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
                             f"{shown_default('batch_mb')})")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        help=f"log verbosity (default: {shown_default('log_level')})")
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
    for name, module in _COMMANDS.items():
        command = parser.add_command(
            sub, name, help=module.HELP, description=module.DESCRIPTION, epilog=module.EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        _shared_flags(command)
        module.add_arguments(command)
    _shared_flags(parser.add_command(
        sub, "rebuild", help="move a corrupt ledger aside and read the transcripts again",
        description="Move the ledger's files aside (kept beside it, never deleted), then read "
                    "every transcript still on disk into a new ledger. Requests whose "
                    "transcripts are gone are not in the new one (docs/reliability.md)."))
    # Listed for --help only: the console script runs it (exporter.cli.entry).
    parser.add_command(sub, "statusline", add_help=False,
                       help="Claude Code's statusLine command: record the plan-limit figures, "
                            "print one line with the session's and today's cost; "
                            "`statusline --install` sets it up (docs/plan-limits.md)")
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
    gen.add_argument("--codex-sessions", type=int, default=0, metavar="N",
                     help="also write an OpenAI Codex CLI home of N threads at ROOT/codex, its "
                          "truth under \"codex\" in truth.json (default: none)")
    return parser


def main(argv: Sequence[str] | None = None, environ: Environ | None = None) -> int:
    """Run one command line (default ``sys.argv``) under ``environ`` (default os.environ)."""
    words = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(words)
    if args.command == "statusline":
        parser.error("statusline runs through the console script: claude-code-exporter statusline")
    if args.command == "generate":
        return cmd_generate(args)
    try:
        settings = _settings_of(args, env)
    except ConfigError as exc:
        print(f"claude-code-exporter: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    log = make_logger(settings.log_level, settings.log_format)
    command = cmd_rebuild if args.command == "rebuild" else _COMMANDS[args.command].run
    try:
        code: int = command(args, settings, log, env)
    except Exception as exc:  # every failure gets its code and message (_failed)
        return _failed(args.command, exc, log)
    return code


def _settings_of(args: argparse.Namespace, environ: Environ) -> Settings:
    """Settings from the flags that name settings, the environment and --config."""
    fields = set(Settings.model_fields)
    flags = {k: v for k, v in vars(args).items() if k in fields}
    return load_settings(flags, environ, args.config)


def cmd_rebuild(args: argparse.Namespace, settings: Settings, log: Any,
                environ: Environ) -> int:
    """Move the ledger aside, then ingest every transcript on disk into a new one."""
    from exporter.ledger.rebuild import move_aside

    aside = move_aside(settings.ledger_path, time.time())
    dirs = transcript_dirs(settings, environ)
    ledger = open_ledger(settings, load_prices(settings), dirs, "rebuild")
    try:
        scan = ingest(ledger, settings, log, discover.present(dirs), show_progress=True,
                      codex=codex_homes(settings, environ))
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
                                           target_bytes=target,
                                           codex_sessions=args.codex_sessions))
    codex = (f", a Codex home in {args.root / 'codex'} ({truth['codex']['totals']['requests']} "
             "requests)" if "codex" in truth else "")
    print(f"wrote {args.root} ({truth['totals']['requests']} requests){codex}; truth in "
          f"{args.root / 'truth.json'}")
    return 0


def _failed(command: str, exc: Exception, log: Any) -> int:
    """Say why a command could not run; return its exit code.

    Only what is known to be configuration is exit 2, which the systemd units
    do not restart (``RestartPreventExitStatus``): anything else, a ValueError
    from ingestion included, is :data:`EXIT_INTERNAL`, logged with its
    traceback, and restarted.
    """
    if isinstance(exc, report_command.UsageError):
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
