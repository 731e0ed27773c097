"""The ledger a ``report`` reads: its own, serve's, or a private one of roots serve does not follow.

Beside a running ``serve`` the state dir's ledger is serve's: report may only
read it (one writer per ledger), and it holds only what serve follows. When
the report is asked about transcripts serve does not follow (``--data-dir B``
or ``CLAUDE_CONFIG_DIR`` beside ``serve --data-dir A``), serve's ledger cannot
answer: what it holds of B, if anything, is as old as the last writer that
read B. Rather than an empty or stale answer, the report reads those roots
into a private ledger in a temporary directory (owner-only, removed when the
report ends) and answers from it, exactly as a fresh ``report --state-dir``
would: serve's ledger is never written, and nothing is left behind. The price
is one full read of those transcripts per report; stderr says so, and how to
make it instant (let serve follow them).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.cli.config import Settings
from exporter.cli.pipeline import open_ledger
from exporter.ledger.schema import LEDGER_FILE
from exporter.ledger.store import Ledger
from exporter.projections.pricing import RateTable

PREFIX = "claude-code-exporter-report-"  # the temporary directory's name starts so


@dataclass(frozen=True, slots=True)
class Opened:
    """The ledger a report reads, and how it came by it."""

    ledger: Ledger
    private: bool  # a temporary ledger of the asked roots (serve follows others)

    @property
    def writes(self) -> bool:
        """Whether this report ingests into the ledger (its own or a private one)."""
        return not self.ledger.readonly


@contextlib.contextmanager
def report_ledger(settings: Settings, pricing: RateTable, dirs: Sequence[Path],
                  temp_root: Path | None = None) -> Iterator[Opened]:
    """The ledger for one report over ``dirs``, closed (and a private one removed) after.

    ``temp_root``: where the private ledger's directory is made (default: the
    system's temporary directory, ``TMPDIR``).
    """
    ledger = open_ledger(settings, pricing, dirs, quiet=True)
    missing = unfollowed(ledger, dirs)
    if not ledger.readonly or ledger.holder is None or not missing:
        if ledger.readonly and ledger.holder is not None:
            print(f"claude-code-exporter: serve (pid {ledger.holder.pid}) is following the "
                  "transcripts; reporting from its ledger", file=sys.stderr)
        try:
            yield Opened(ledger, private=False)
        finally:
            ledger.close()
        return
    pid = ledger.holder.pid
    ledger.close()
    with tempfile.TemporaryDirectory(prefix=PREFIX, dir=temp_root) as temp:
        print(f"claude-code-exporter: serve (pid {pid}) does not follow "
              f"{', '.join(str(d) for d in missing)}: reading the transcripts into a temporary "
              "ledger for this report (removed after it); for an instant answer, let serve "
              "follow them too (serve --data-dir for each)", file=sys.stderr)
        private = open_ledger(settings, pricing, dirs, path=Path(temp) / LEDGER_FILE)
        try:
            yield Opened(private, private=True)
        finally:
            private.close()


def unfollowed(ledger: Ledger, dirs: Sequence[Path]) -> list[Path]:
    """Those of ``dirs`` that exist and that the serve writing ``ledger`` does not follow."""
    if ledger.holder is None:
        return []
    followed = {os.path.abspath(r) for r in ledger.holder.roots}
    return [d for d in dirs if os.path.abspath(d) not in followed and d.is_dir()]
