"""What the ledger works out while it applies one batch (:class:`Batch`), and its result."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.records import Applied, CountRow, HistRow, Request


@dataclass(slots=True)
class Batch:
    """One batch being applied: its rows by id, their roots, files, chains; :meth:`applied`."""

    new: list[Request] = field(default_factory=list)
    upgraded: list[tuple[Request, Request]] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    iterations: dict[str, int] = field(default_factory=dict)
    mended: dict[str, int] = field(default_factory=dict)
    bytes_read: int = 0
    counts: list[CountRow] = field(default_factory=list)
    hists: list[HistRow] = field(default_factory=list)
    late: int = 0
    roots: dict[str, int] = field(default_factory=dict)
    agents: dict[str, str] = field(default_factory=dict)  # root path -> whose logs it holds
    ids: dict[str, int] = field(default_factory=dict)
    new_ids: list[int] = field(default_factory=list)
    rows: dict[int, Request] = field(default_factory=dict)  # every touched row, as it will be
    known: dict[int, Request] = field(default_factory=dict)  # stored rows before the batch
    changed: dict[int, Request] = field(default_factory=dict)  # rows rewritten (old values)
    before: dict[int, int] = field(default_factory=dict)  # stored roots bitmasks
    masks: dict[int, int] = field(default_factory=dict)  # roots bitmasks after the batch
    moved: set[int] = field(default_factory=set)  # time or source changed
    seen: dict[int, set[int]] = field(default_factory=dict)  # files each row appeared in now
    files: set[int] = field(default_factory=set)  # whose chains must be recomputed
    fresh_files: set[int] = field(default_factory=set)  # files this batch created
    file_session: dict[int, str] = field(default_factory=dict)
    new_appearances: list[tuple[int, int]] = field(default_factory=list)
    prevs: dict[tuple[int, int], float | None] = field(default_factory=dict)  # to write
    sessions: dict[str, float] = field(default_factory=dict)  # latest ts seen per session
    grown: set[str] = field(default_factory=set)  # sessions whose last time moved
    slot_times: set[float] = field(default_factory=set)  # times of changed rows (old and new)
    folders: set[str] = field(default_factory=set)  # project folders of the batch's files

    def applied(self) -> Applied:
        """The public result."""
        return Applied(self.new, self.upgraded, self.lines, self.rejected, self.bytes_read,
                       self.counts, self.hists, self.late, self.roots, len(self.new),
                       len(self.upgraded), self.iterations, self.mended, self.folders,
                       self.agents)

