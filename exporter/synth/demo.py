"""A live demo session: appends one streamed request every few seconds.

Used by ``serve --demo`` so that a newcomer's dashboards move: the context
grows turn by turn, most of the prompt is a cache read, the output varies,
and each response is written as two lines (a partial and a final one), as
Claude Code does.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from exporter.synth.identifiers import encode_cwd, iso

DEMO_CWD = "/home/demo/live-project"


class LiveSession:
    """Writes a growing session transcript into ``root/projects``."""

    def __init__(self, root: Path, seed: int = 0, clock: Callable[[], float] = time.time) -> None:
        """Prepare the file; nothing is written until :meth:`step`."""
        self._rng = random.Random(seed)
        self._clock = clock
        self.session = f"{self._rng.getrandbits(128):032x}"
        self.session = "-".join((self.session[:8], self.session[8:12], self.session[12:16],
                                 self.session[16:20], self.session[20:]))
        folder = root / "projects" / encode_cwd(DEMO_CWD)
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{self.session}.jsonl"
        self._context = 18_000
        self._turn = 0

    def step(self) -> None:
        """Append one request (two streamed lines sharing its ids)."""
        rng, self._turn = self._rng, self._turn + 1
        added = rng.randint(300, 4_000)
        output = int(rng.lognormvariate(6.2, 1.0))
        ms = int(self._clock() * 1000)
        ids = (f"msg_01demo{self._turn:06d}{rng.getrandbits(32):08x}",
               f"req_011Cdemo{self._turn:06d}{rng.getrandbits(32):08x}")
        lines = [self._line(ids, ms, added, min(output, rng.randint(1, 25))),
                 self._line(ids, ms + rng.randint(200, 3_000), added, output)]
        with self.path.open("ab") as fh:
            fh.write(b"".join(msgspec.json.encode(line) + b"\n" for line in lines))
        self._context += added + output

    def _line(self, ids: tuple[str, str], ms: int, added: int, output: int) -> dict[str, object]:
        """One assistant line of the current request."""
        usage = {"input_tokens": 3, "cache_creation_input_tokens": added,
                 "cache_read_input_tokens": self._context,
                 "cache_creation": {"ephemeral_5m_input_tokens": added,
                                    "ephemeral_1h_input_tokens": 0},
                 "output_tokens": output, "service_tier": "standard", "inference_geo": "global"}
        return {"parentUuid": None, "isSidechain": False, "userType": "external",
                "cwd": DEMO_CWD, "sessionId": self.session, "version": "2.1.39",
                "type": "assistant", "timestamp": iso(ms), "requestId": ids[1],
                "message": {"model": "claude-opus-4-6", "id": ids[0], "type": "message",
                            "role": "assistant", "content": [{"type": "text", "text": "…"}],
                            "usage": usage}}


def run_live(session: LiveSession, stop: threading.Event, every: float = 6.0) -> None:
    """Append a request every ``every`` seconds until ``stop`` is set."""
    while not stop.wait(every):
        session.step()
