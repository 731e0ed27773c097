"""``usage.iterations`` for generated requests, and what the exporter must make of them.

With ``GenOptions.iterations`` a request whose message id hashes into one of
four slots (deterministic: no draw from the generator's random stream, so
the rest of a tree is the same with or without them) carries one shape
(docs/figures.md, "Iterations"):

- ``advisor``: two ``message`` entries that add up to the top-level usage and
  an ``advisor_message`` on ``ADVISOR_MODEL`` that reads the whole prompt:
  billed on top, a request of its own;
- ``fallback``: a refused ``claude-fable-5`` attempt, then a
  ``fallback_message`` equal to the top-level usage: the attempt is not billed;
- ``compaction``: a ``compaction`` and a ``message`` entry that add up to the
  top-level usage: nothing more billed;
- ``unknown``: the top-level usage as a ``message`` and an undocumented
  ``critic_message``: counted by name, never priced.

Every copy of a line (streaming split, progress copy, resume) carries the
same entries; the ``message`` entries follow the line's own output count.
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Any, Final

from exporter.synth.model import OPUS, SimRequest

ADVISOR_MODEL: Final = OPUS
REFUSED_MODEL: Final = "claude-fable-5"
UNKNOWN_TYPE: Final = "critic_message"
SHAPES: Final = ("advisor", "fallback", "compaction", "unknown")
SLOTS: Final = 10  # a request in ten carries each shape (four slots of ten)


def shape(req: SimRequest) -> str:
    """The shape ``req`` carries ("" for none); old builds' records carry none."""
    if not req.iterations or req.legacy_usage or req.part_key:
        return ""
    slot = zlib.crc32(req.msg_id.encode()) % SLOTS
    return SHAPES[slot] if slot < len(SHAPES) else ""


def advisor_output(req: SimRequest) -> int:
    """The consultation's output tokens (advice plus thinking), fixed per request."""
    return 400 + zlib.crc32(req.key.encode()) % 1_400


def entries(req: SimRequest, output: int) -> list[dict[str, Any]]:
    """The ``iterations`` of one line of ``req`` whose top-level output is ``output``."""
    kind = shape(req)
    writes = {"cache_creation_input_tokens": req.cache_write_5m + req.cache_write_1h,
              "cache_creation": {"ephemeral_5m_input_tokens": req.cache_write_5m,
                                 "ephemeral_1h_input_tokens": req.cache_write_1h}}
    top = {"input_tokens": req.input, "output_tokens": output,
           "cache_read_input_tokens": req.cache_read, **writes}
    first = output // 3
    if kind == "advisor":
        return [{"type": "message", **top, "output_tokens": first},
                {"type": "advisor_message", "model": ADVISOR_MODEL, "input_tokens": req.context,
                 "output_tokens": advisor_output(req), "cache_read_input_tokens": 0,
                 "cache_creation_input_tokens": 0},
                {"type": "message", "input_tokens": 0, "output_tokens": output - first}]
    if kind == "fallback":
        return [{"type": "message", "model": REFUSED_MODEL, "input_tokens": 2, "output_tokens": 2,
                 "cache_read_input_tokens": req.cache_read, **writes},
                {"type": "fallback_message", "model": req.model, **top}]
    if kind == "compaction":
        return [{"type": "compaction", "input_tokens": req.input, "output_tokens": first,
                 "cache_read_input_tokens": req.cache_read},
                {"type": "message", "input_tokens": 0, "output_tokens": output - first,
                 "cache_read_input_tokens": 0, **writes}]
    if kind == "unknown":
        return [{"type": "message", **top},
                {"type": UNKNOWN_TYPE, "model": ADVISOR_MODEL, "input_tokens": 500,
                 "output_tokens": 40}]
    return []


def line_kinds(req: SimRequest) -> Counter[str]:
    """What the exporter counts for one line of ``req`` (``report --json`` ``iterations``)."""
    kind = shape(req)
    if kind == "advisor":
        return Counter(advisor=1)
    if kind == "fallback":
        return Counter(fallback=1, superseded=1)
    if kind == "unknown":
        return Counter({f"unknown:{UNKNOWN_TYPE}": 1})
    return Counter()


def part(req: SimRequest) -> SimRequest | None:
    """The consultation billed on top of ``req``, as the exporter keys it (None: none)."""
    if shape(req) != "advisor":
        return None
    return SimRequest(
        msg_id=req.msg_id, request_id=req.request_id, model=ADVISOR_MODEL, input=req.context,
        output=advisor_output(req), cache_read=0, cache_write_5m=0, cache_write_1h=0,
        geo=req.geo, part_key=f"{req.key}\x1eadvisor_message\x1f{ADVISOR_MODEL}\x1f0",
        attribution=req.attribution)  # the line's attribution (synth.attribution)
