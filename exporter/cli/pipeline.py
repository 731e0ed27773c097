"""What ``report``, ``backfill`` and ``rebuild`` share: the prices, the ledger, one ingestion pass.

Each command opens the ledger with the counting rules ``serve`` uses, reads
what is new under the transcript roots, and moves the status line's samples
in, as the ledger's writer; beside a running ``serve`` it only reads.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from exporter.cli.assemble import prices, scan_options
from exporter.cli.config import Settings
from exporter.ingest import discover, formats
from exporter.ingest.scan import ScanResult
from exporter.ledger.store import Ledger
from exporter.progress import progress_bar
from exporter.projections.pricing import RateTable

Environ = Mapping[str, str]
"""The process's environment, read once by exporter.cli.commands.main and handed down."""


def transcript_dirs(settings: Settings, environ: Environ) -> list[Path]:
    """Every root to read: Claude Code's (--data-dir, or the default roots), then Codex homes."""
    homes = codex_homes(settings, environ)
    claude = [d for d in settings.data_dirs if d not in homes]
    if settings.data_dirs and not claude:  # only Codex homes given: no Claude Code default
        return homes
    return [*discover.transcript_dirs(claude, environ, Path.home()), *homes]


def codex_homes(settings: Settings, environ: Environ) -> list[Path]:
    """The Codex homes to read: --codex-home; else those among --data-dir; else the defaults."""
    if settings.codex_homes:
        return list(settings.codex_homes)
    if settings.data_dirs:
        return formats.split_data_dirs(settings.data_dirs)[1]
    return formats.default_codex_homes(environ, Path.home())


def load_prices(settings: Settings) -> RateTable:
    """The prices of this run; why ``--update-prices`` could not update them goes to stderr."""
    return prices(settings, warn=lambda line: print(f"claude-code-exporter: {line}",
                                                    file=sys.stderr))


def open_ledger(settings: Settings, pricing: RateTable, dirs: Sequence[Path],
                role: str = "report", *, path: Path | None = None,
                quiet: bool = False) -> Ledger:
    """The ledger (at ``path``, default the state dir's), keeping serve's counting rules.

    Beside a running ``serve`` it is a reader of serve's ledger (``readonly``):
    nothing is ingested, serve does that (exporter.ledger.access.open_ledger);
    stderr says so, and which of ``dirs`` serve does not follow, unless
    ``quiet`` (the caller says it: exporter.cli.report_ledger).
    """
    from exporter.ledger.access import open_ledger as open_for
    from exporter.projections.counting import Counting

    rules = Counting(pricing, settings.kv_bytes_per_token, settings.upload_bytes_per_token)
    ledger = open_for(path or settings.ledger_path, role, [str(d) for d in dirs], rules=rules,
                      settle_seconds=settings.settle_seconds)
    if ledger.readonly and ledger.holder is not None and not quiet:
        followed = {os.path.abspath(r) for r in ledger.holder.roots}
        unread = [str(d) for d in dirs if os.path.abspath(d) not in followed and d.is_dir()]
        print(f"claude-code-exporter: serve (pid {ledger.holder.pid}) is following the "
              f"transcripts; reporting from its ledger without reading them"
              + (f" ({', '.join(unread)} not followed by it: not read)" if unread else ""),
              file=sys.stderr)
    return ledger


def ingest(ledger: Ledger, settings: Settings, log: Any, dirs: Sequence[Path], *,
           show_progress: bool, quiet: bool = False,
           codex: Sequence[Path] = ()) -> ScanResult:
    """One ingestion pass over ``dirs`` into ``ledger`` (what `report` and `backfill` do first).

    ``codex``: which of ``dirs`` are Codex homes. ``quiet`` logs the pass at
    DEBUG (a terminal report is its own summary of the pass).
    """
    scanner = scan_options(settings, codex).scanner(ledger, dirs, log=log)
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
        done = ingest_spool(settings.ledger_path, settings.samples_dir)
    except (OSError, sqlite3.Error) as exc:
        log.warning("plan_samples_not_ingested", detail=str(exc))
        return
    log.debug("plan_samples_ingested", new=done.new, repeated=done.repeated,
              bytes_read=done.bytes_read)
