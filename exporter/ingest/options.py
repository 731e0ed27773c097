"""How ingestion passes are sized: the scan options, built once from the settings.

``report`` and ``backfill`` run one pass with them; ``serve`` builds two
scanners from the same options: the catch-up at start, which may fork parser
processes (no thread exists yet), and the follower's, one process beside the
HTTP and watcher threads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.ingest.destination import DestinationT
from exporter.ingest.formats import CODEX, Root
from exporter.ingest.parse import MAX_LINE_BYTES
from exporter.ingest.scan import BATCH_BYTES, Scanner
from exporter.records import Applied


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """Parser processes, commit size and the longest line read."""

    workers: int | None = None  # None: the CPU count, at most 8
    batch_bytes: int = BATCH_BYTES
    max_line_bytes: int = MAX_LINE_BYTES
    codex_homes: tuple[str, ...] = ()  # which of a scanner's dirs are Codex homes (absolute)

    def scanner(
        self, ledger: DestinationT, dirs: Sequence[Path], *, log: Any,
        clock: Callable[[], float] = time.time, workers: int | None = None,
        on_applied: Callable[[Applied], None] | None = None,
    ) -> Scanner[DestinationT]:
        """A scanner over ``dirs`` into ``ledger``; ``workers`` overrides the options' own.

        Each of ``dirs`` is a Claude Code root unless it is one of ``codex_homes``.
        """
        codex = [d for d in dirs if os.path.abspath(d) in self.codex_homes]
        claude = [d for d in dirs if os.path.abspath(d) not in self.codex_homes]
        return Scanner(ledger, claude, workers=self.workers if workers is None else workers,
                       on_applied=on_applied, log=log, batch_bytes=self.batch_bytes,
                       max_line_bytes=self.max_line_bytes, clock=clock,
                       others=[Root(d, CODEX) for d in codex])
