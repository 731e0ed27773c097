"""Where a scan's batches go: what the scanner needs of the ledger, and no more.

The ingest stage imports no later stage; the wiring hands the scanner a
``Ledger``, which satisfies this protocol structurally.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from exporter.records import Appearance, Applied, Checkpoint, Parsed, RootLines


class Destination(Protocol):
    """The store a scan commits parsed batches, provenance and checkpoints to."""

    def apply(
        self, parsed: Parsed, checkpoints: Sequence[Checkpoint], bytes_read: int,
        appearances: Sequence[Appearance] = (), by_root: RootLines | None = None, /,
    ) -> Applied:
        """Merge one batch, its checkpoints, line counts (also by root), provenance atomically."""
        ...

    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every file's checkpoint, by path: where the next read of it starts."""
        ...

    def forget_files(self, paths: Iterable[str], /) -> None:
        """Drop the checkpoints of files that no longer exist."""
        ...

    def bulk(self, expected_rows: int, /, *, raw: bool = False) -> AbstractContextManager[None]:
        """Around a pass expected to add ``expected_rows``; ``raw``: nobody needs per-batch rows."""
        ...

    @property
    def raw(self) -> bool:
        """Whether a raw pass is under way (its batches cost little to commit)."""
        ...


DestinationT = TypeVar("DestinationT", bound=Destination)
"""A scanner's destination as its caller typed it (a scanner hands back what it was given)."""
