"""Precomputed payloads: the tool output, text and thinking that make up most bytes.

Building and JSON-escaping hundreds of kilobytes per line would dominate the
run time, so a fixed pool of payloads is drawn once per tree and every line
picks from it. Payloads are pre-encoded ``msgspec.Raw`` JSON strings: the
encoder splices them in without escaping them again.

Some tool results quote whole transcript lines — with ``"type":"assistant"`` and
``"usage":{…}`` inside the escaped string and ids that occur nowhere else — so a
parser that matches bytes instead of parsing JSON inflates every total.
"""

from __future__ import annotations

import math
import random
from typing import Any, Final

import msgspec

from exporter.synth.identifiers import Ids, iso

# Words of the code-like filler text (a tuple literal, split for readability).
_VOCAB: Final = tuple(
    " ".join(
        (
            "def class return import from self None True False if else elif for while in not",
            "and or try except raise with as yield async await lambda print len range dict",
            "list str int request session cache token usage model context prompt ledger parse",
            "line file path config metrics exporter counter gauge histogram bucket label value",
            "total seconds bytes = == != <= >= + - * / % ( ) [ ] { } : , . -> # TODO FIXME",
            'assert test_ fixture pytest 0 1 2 42 100 1000 0.5 \'utf-8\' "main" f"{x}" os.path',
            "json.loads msgspec.Raw logger.info",
        )
    ).split(" ")
)
_CORPUS_BYTES: Final = 420_000
MAX_PAYLOAD: Final = 200_000
_ENCODE = msgspec.json.encode


class NoisePool:
    """Payloads drawn once from the tree's RNG; lines pick from them by index."""

    def __init__(self, rng: random.Random, ids: Ids, start_ms: int) -> None:
        """Build every pool from ``rng`` (quoted lines get fresh ids from ``ids``)."""
        self.rng = rng
        corpus = _corpus(rng)
        self.tool_results = [_raw(_slice(rng, corpus, _size(rng, 300, 1.3))) for _ in range(380)]
        self.tool_results += [_raw(_slice(rng, corpus, n)) for n in (120_000, MAX_PAYLOAD)]
        self.quotes = [_raw(_quote(rng, ids, corpus, start_ms)) for _ in range(16)]
        self.texts = [_raw(_slice(rng, corpus, _size(rng, 150, 0.9))) for _ in range(64)]
        self.thinking = [_raw(_slice(rng, corpus, _size(rng, 300, 0.8))) for _ in range(64)]
        self.signatures = [ids.alnum(rng.randrange(150, 350)) for _ in range(16)]
        self.commands = [_raw(_slice(rng, corpus, _size(rng, 90, 0.7))) for _ in range(64)]
        self.bash = [_raw(_slice(rng, corpus, _size(rng, 200, 1.0))) for _ in range(64)]

    def tool_result(self) -> msgspec.Raw:
        """The content of one tool result; about 3 % quote transcript lines."""
        rng = self.rng
        if rng.random() < 0.03:
            return rng.choice(self.quotes)
        return rng.choice(self.tool_results)

    def text(self) -> msgspec.Raw:
        """A short assistant text."""
        return self.rng.choice(self.texts)

    def thought(self) -> msgspec.Raw:
        """A thinking block's text."""
        return self.rng.choice(self.thinking)

    def signature(self) -> str:
        """A thinking block's opaque signature."""
        return self.rng.choice(self.signatures)

    def command(self) -> msgspec.Raw:
        """A Bash tool call's command."""
        return self.rng.choice(self.commands)

    def bash_output(self) -> msgspec.Raw:
        """Streaming shell output of a bash_progress line (quotes now and then)."""
        rng = self.rng
        return rng.choice(self.quotes) if rng.random() < 0.01 else rng.choice(self.bash)


def _raw(text: str) -> msgspec.Raw:
    """``text`` as a pre-encoded JSON string."""
    return msgspec.Raw(_ENCODE(text))


def _size(rng: random.Random, median: float, sigma: float) -> int:
    """A log-normal payload size in bytes, within [100, MAX_PAYLOAD] (min 40 for short text)."""
    return min(MAX_PAYLOAD, max(40, int(median * math.exp(rng.gauss(0, sigma)))))


def _corpus(rng: random.Random) -> str:
    """Code-like text to cut payloads from (one big draw, no per-line work)."""
    words = rng.choices(_VOCAB, k=_CORPUS_BYTES // 5)
    lengths = rng.choices(range(3, 14), k=len(words) // 3)
    lines, pos = [], 0
    for n in lengths:
        if pos >= len(words):
            break
        lines.append("    " * (n % 3) + " ".join(words[pos : pos + n]))
        pos += n
    return "\n".join(lines)


def _slice(rng: random.Random, corpus: str, size: int) -> str:
    """``size`` characters of the corpus from a random offset."""
    size = min(size, len(corpus))
    start = rng.randrange(len(corpus) - size + 1)
    return corpus[start : start + size]


def _quote(rng: random.Random, ids: Ids, corpus: str, start_ms: int) -> str:
    """A tool output that quotes transcript lines verbatim, usage records included."""
    rows: list[bytes] = []
    for _ in range(rng.randrange(1, 4)):
        line = _quoted_assistant(rng, ids, start_ms + rng.randrange(86_400_000))
        encoded = _ENCODE(line)
        rows.append(msgspec.json.format(encoded, indent=0) if rng.random() < 0.3 else encoded)
    head = "$ tail -n 3 ~/.claude/projects/-home-dev-projects-demo/session.jsonl\n"
    body = b"\n".join(rows).decode()
    return head + body + "\n" + _slice(rng, corpus, rng.randrange(100, 2_000))


def _quoted_assistant(rng: random.Random, ids: Ids, ms: int) -> dict[str, Any]:
    """A complete assistant record with large usage, as it would sit in a transcript."""
    return {
        "parentUuid": ids.uuid(),
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/projects/demo",
        "sessionId": ids.uuid(),
        "version": "2.1.39",
        "message": {
            "model": "claude-opus-4-6",
            "id": ids.message_id(),
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "quoted"}],
            "usage": {
                "input_tokens": rng.randrange(1, 9_999),
                "cache_creation_input_tokens": rng.randrange(10_000, 99_999),
                "cache_read_input_tokens": rng.randrange(100_000, 999_999),
                "output_tokens": rng.randrange(1_000, 99_999),
            },
        },
        "requestId": ids.request_id(),
        "type": "assistant",
        "uuid": ids.uuid(),
        "timestamp": iso(ms),
    }
