"""Malformed lines, one builder per variant, each with the rejection reason it must get.

Every variant except the non-objects is an otherwise valid usage record whose
key occurs nowhere else: a parser that accepted it by mistake would change the
totals, so the truth catches it. Each line has exactly one defect.
"""

from __future__ import annotations

from typing import Final

import msgspec

from exporter.synth import lines
from exporter.synth.identifiers import Ids
from exporter.synth.lines import Record
from exporter.synth.model import OPUS, SimRequest

# variant -> reason (the exporter's ``records.RejectReason`` values)
VARIANTS: Final = {
    "truncated": "invalid_json",
    "nul_byte": "invalid_json",
    "bad_utf8": "invalid_utf8",
    "array": "not_object",
    "string": "not_object",
    "number": "not_object",
    "tokens_as_string": "bad_usage",
    "usage_null": "bad_usage",
    "tokens_float": "bad_usage",
    "negative": "negative_tokens",
    "missing_id": "missing_id",
    "bad_timestamp": "bad_timestamp",
}
_NON_OBJECTS: Final = {"array": b"[1,2]", "string": b'"str"', "number": b"42"}


def malformed(variant: str, head: Record, ids: Ids, ms: int) -> tuple[str, bytes]:
    """The rejection reason and bytes (no newline) of one malformed line."""
    reason = VARIANTS[variant]
    if variant in _NON_OBJECTS:
        return reason, _NON_OBJECTS[variant]
    line = _record(head, ids, ms)
    msg = line["message"]
    use = msg["usage"]
    if variant == "tokens_as_string":
        use["output_tokens"] = "12"
    elif variant == "usage_null":
        msg["usage"] = None
    elif variant == "tokens_float":
        use["input_tokens"] = 12.5
    elif variant == "negative":
        use["input_tokens"] = -5
    elif variant == "missing_id":
        del msg["id"]
    elif variant == "bad_timestamp":
        line["timestamp"] = "yesterday"
    data = msgspec.json.encode(line)
    if variant == "truncated":
        return reason, data[: len(data) * 3 // 5]  # cut mid-object: a partially written line
    if variant == "nul_byte":
        return reason, data.replace(b'"text":"', b'"text":"\x00', 1)  # raw NUL inside a string
    if variant == "bad_utf8":
        return reason, data.replace(b'"text":"', b'"text":"\xff\xfe', 1)
    return reason, data


def _record(head: Record, ids: Ids, ms: int) -> Record:
    """A well-formed assistant usage record with a key used nowhere else."""
    req = SimRequest(
        msg_id=ids.message_id(),
        request_id=ids.request_id(),
        model=OPUS,
        input=7,
        output=4_321,
        cache_read=123_456,
        cache_write_5m=2_345,
        cache_write_1h=0,
    )
    text = lines.block("text", msgspec.Raw(b'"a damaged line"'), "")
    msg = lines.message(req, text, req.output)  # fresh dicts: the caller may edit them
    return lines.assistant(lines.At(head, ids.uuid(), ids.uuid(), ms), msg, req.request_id)
