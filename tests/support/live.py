"""A live Claude Code session's next lines, shaped like real ones for the disk-write measures."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from exporter.synth.identifiers import Ids
from tests.support.records import assistant, jsonl


class LiveSession:
    """A live session's next request, shaped like Claude Code's.

    Random message and request ids (keys land anywhere in the key index), a
    context that grows turn by turn and falls back after a compaction, and
    outputs of every size: each line's entries land where a real one's would in
    every index, not beside the previous line's.
    """

    def __init__(self, seed: int = 12, session: str = "live") -> None:
        """Draw every id and size from one seeded generator."""
        self.rng = random.Random(seed)
        self.ids, self.context, self.session = Ids(self.rng), 20_000, session

    def line(self, ts: str | None = None) -> bytes:
        """The next request's line, timed ``ts`` (default: now)."""
        now = ts or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        grown = self.rng.randint(200, 6_000)
        self.context = 30_000 if self.context + grown > 180_000 else self.context + grown
        usage = {"input_tokens": self.rng.randint(1, 40),
                 "output_tokens": int(self.rng.lognormvariate(5.5, 1.2)) + 1,
                 "cache_read_input_tokens": self.context - grown,
                 "cache_creation_input_tokens": grown,
                 "cache_creation": {"ephemeral_5m_input_tokens": grown,
                                    "ephemeral_1h_input_tokens": 0}}
        return jsonl(assistant(self.ids.message_id(), self.ids.request_id(), ts=now,
                               session=self.session, usage=usage))
