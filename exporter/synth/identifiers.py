"""Identifiers and timestamps shaped like Claude Code's, derived from one seeded RNG.

Everything here is deterministic: ids come from ``random.Random`` (never uuid4 or
the wall clock), so one seed always writes byte-identical transcripts.
"""

from __future__ import annotations

import random
import time
from typing import Final

# Anthropic ids are base62-looking. A 256-entry translation table maps every
# random byte to one of 62 characters in one C call (the slight bias is harmless).
_ALNUM: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ALNUM_TABLE: Final = bytes.maketrans(
    bytes(range(256)), bytes(ord(_ALNUM[i % 62]) for i in range(256))
)
_HEX_TABLE: Final = bytes.maketrans(
    bytes(range(256)), bytes(ord("0123456789abcdef"[i % 16]) for i in range(256))
)


class Ids:
    """Factory for the ids found in transcripts (uuids, msg_…, req_…, toolu_…, agent ids)."""

    def __init__(self, rng: random.Random) -> None:
        """Draw every id from ``rng``."""
        self._rng = rng

    def alnum(self, n: int) -> str:
        """``n`` random base62 characters."""
        return self._rng.randbytes(n).translate(_ALNUM_TABLE).decode("ascii")

    def hex(self, n: int) -> str:
        """``n`` random lowercase hex digits."""
        return self._rng.randbytes(n).translate(_HEX_TABLE).decode("ascii")

    def uuid(self) -> str:
        """A version-4-shaped UUID string."""
        h = self._rng.randbytes(16).hex()
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"

    def message_id(self, bedrock: bool = False) -> str:
        """An Anthropic message id (``msg_01…``; Bedrock's ``msg_bdrk_01…``)."""
        return ("msg_bdrk_01" if bedrock else "msg_01") + self.alnum(22)

    def request_id(self) -> str:
        """An API request id (``req_011C…``)."""
        return "req_011C" + self.alnum(20)

    def tool_use_id(self) -> str:
        """A tool_use block id (``toolu_01…``)."""
        return "toolu_01" + self.alnum(22)

    def agent_id(self) -> str:
        """A 2.1.x subagent id: ``a`` and six hex digits (seven characters)."""
        return "a" + self.hex(6)

    def compact_agent_id(self) -> str:
        """An auto-compaction agent id: ``acompact-`` and six hex digits."""
        return "acompact-" + self.hex(6)


def iso(ms: int) -> str:
    """UTC ISO-8601 with milliseconds and ``Z``, as Claude Code writes them.

    >>> iso(1_790_856_003_123)
    '2026-10-01T12:00:03.123Z'
    """
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def encode_cwd(cwd: str) -> str:
    """The project directory name Claude Code derives from a cwd (``/``, ``_``, ``.`` → ``-``)."""
    return cwd.replace("/", "-").replace("_", "-").replace(".", "-")
