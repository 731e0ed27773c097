"""``serve --demo``'s transcripts: a month of history, then a live session.

:func:`history` writes a month of generated sessions ending now (a busy last
day, one smaller session a day before it), so the page's daily chart and the
range choices have something to show. :class:`LiveSession` then appends one
streamed request every few seconds so that a newcomer's dashboards move: the
context grows turn by turn, most of the prompt is a cache read, the output
varies, and each response is written as two lines (a partial and a final
one), as Claude Code does.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from exporter.synth import GenOptions, generate
from exporter.synth.identifiers import encode_cwd, iso

DEMO_CWD = "/home/demo/live-project"
HISTORY_DAYS = 30
#: The last day's sessions start this long before now: generated sessions span about
#: a day, and requests dated after now would wait as ahead of the clock.
LAST_DAY_HOURS = 28


def history(root: Path, now: float, seed: int = 0, days: int = HISTORY_DAYS) -> int:
    """Write ``days`` days of sessions ending at ``now`` into ``root/projects``; return requests.

    The last day is the generator's default tree; each earlier day one smaller
    session, each generated apart and moved into one tree (session ids are random,
    so files never collide).
    """
    newest = datetime.fromtimestamp(now, UTC).replace(microsecond=0)
    newest -= timedelta(hours=LAST_DAY_HOURS)
    total = generate(root, GenOptions(seed=seed, start=newest))["totals"]["requests"]
    for day in range(1, days):
        part = root / f".day-{day}"
        options = GenOptions(seed=seed * 1000 + day, sessions=1, requests_per_session=40,
                             malformed=False, start=newest - timedelta(days=day))
        total += generate(part, options)["totals"]["requests"]
        _merge(part / "projects", root / "projects")
        shutil.rmtree(part)
    return int(total)


def _merge(source: Path, target: Path) -> None:
    """Move every file under ``source`` to the same place under ``target``."""
    for folder, _dirs, files in os.walk(source):
        into = target / Path(folder).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            os.replace(Path(folder) / name, into / name)


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
