"""The shapes of a transcript line that msgspec decodes: a tolerant and a fast schema.

Only the few fields a usage record needs are materialised; everything else
(tool output, file contents, thinking text) is validated and skipped without
building Python objects. Two schemas share one set of rules:

- the *fast* schema (:data:`FAST`) types the usage object strictly (token
  counts are integers in range) and the strings the common path reads, so
  msgspec checks them in C; it fits nearly every real line;
- the *tolerant* schema (:data:`TOLERANT`) accepts any JSON type in every
  field; exporter.ingest.classify judges what it decodes by hand, which gives
  every rejected line its reason.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

MAX_TOKENS: Final = 2**53  # anything larger is not a token count (and breaks SQLite)


# A container field may hold any JSON value; only an object of the expected
# shape is used. Listing every JSON type keeps msgspec from raising on lines
# whose unrelated fields have another shape.
_AnyButObject = str | int | float | bool | list[Any] | None


class Message(msgspec.Struct, gc=False):
    """A record's ``message``: the id, model and usage (any JSON type each)."""

    id: Any = None
    model: Any = None
    usage: Any = msgspec.UNSET


class Embedded(msgspec.Struct, gc=False):
    """An assistant record inside a progress line (``data.message``)."""

    type: Any = None
    timestamp: Any = None
    requestId: Any = None  # noqa: N815 - the transcript's own field name
    agentId: Any = None  # noqa: N815
    attributionSkill: Any = None  # noqa: N815 - attribution (docs/figures.md)
    attributionPlugin: Any = None  # noqa: N815
    attributionMcpServer: Any = None  # noqa: N815
    attributionAgent: Any = None  # noqa: N815
    effort: Any = None
    message: Message | _AnyButObject = None


class Data(msgspec.Struct, gc=False):
    """A progress line's ``data``: the agent and the record it carries."""

    type: Any = None
    agentId: Any = None  # noqa: N815
    message: Embedded | _AnyButObject = None


class Line(msgspec.Struct, gc=False):
    """One transcript line, every field of any JSON type (the tolerant schema)."""

    type: Any = None
    isSidechain: Any = None  # noqa: N815
    isApiErrorMessage: Any = None  # noqa: N815
    cwd: Any = None
    sessionId: Any = None  # noqa: N815
    agentId: Any = None  # noqa: N815
    requestId: Any = None  # noqa: N815
    timestamp: Any = None
    costUSD: Any = None  # noqa: N815
    attributionSkill: Any = None  # noqa: N815 - attribution (docs/figures.md)
    attributionPlugin: Any = None  # noqa: N815
    attributionMcpServer: Any = None  # noqa: N815
    attributionAgent: Any = None  # noqa: N815
    effort: Any = None
    message: Message | _AnyButObject = None
    data: Data | _AnyButObject = None


# A token count the fast schema takes: msgspec checks the range in C, and a count out
# of it sends the line to the tolerant path, which names the reason (negative or too big).
_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]


class _FastCacheCreation(msgspec.Struct, gc=False):
    ephemeral_5m_input_tokens: _Count = 0
    ephemeral_1h_input_tokens: _Count = 0


class _FastServerToolUse(msgspec.Struct, gc=False):
    web_search_requests: _Count = 0  # out of range: the tolerant path (which counts 0)


class _FastIteration(msgspec.Struct, gc=False):
    type: str | None = None
    model: str | None = None
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_input_tokens: _Count = 0
    cache_creation_input_tokens: _Count = 0
    cache_creation: _FastCacheCreation | None = None


class FastUsage(msgspec.Struct, gc=False):
    """A usage object with every count an integer in range (the fast schema)."""

    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_input_tokens: _Count = 0
    cache_creation_input_tokens: _Count = 0
    cache_creation: _FastCacheCreation | None = None
    server_tool_use: _FastServerToolUse | None = None
    service_tier: str | None = None
    inference_geo: str | None = None
    speed: str | None = None
    iterations: list[_FastIteration] | None = None  # the parts (exporter.ingest.iterations)


# The fast schema also types the strings the inline path reads (a number where a string
# belongs sends the line to the tolerant path, which treats it as before), so that path
# needs no per-field type checks.
class FastMessage(Message):
    """``Message`` with its strings and usage typed."""

    id: str | None = None
    model: str | None = None
    usage: FastUsage | msgspec.UnsetType = msgspec.UNSET


class FastEmbedded(Embedded):
    """``Embedded`` with the strings the common path reads typed."""

    timestamp: str | None = None
    requestId: str | None = None  # noqa: N815 - the transcript's own field name
    attributionSkill: str | None = None  # noqa: N815 - attribution (docs/figures.md)
    attributionPlugin: str | None = None  # noqa: N815
    attributionMcpServer: str | None = None  # noqa: N815
    attributionAgent: str | None = None  # noqa: N815
    effort: str | None = None
    message: FastMessage | _AnyButObject = None


class FastData(Data):
    """``Data`` carrying a typed embedded record."""

    message: FastEmbedded | _AnyButObject = None


class FastLine(Line):
    """``Line`` with the strings the common path reads typed (the fast schema)."""

    cwd: str | None = None
    sessionId: str | None = None  # noqa: N815 - the transcript's own field name
    requestId: str | None = None  # noqa: N815
    timestamp: str | None = None
    attributionSkill: str | None = None  # noqa: N815 - attribution (docs/figures.md)
    attributionPlugin: str | None = None  # noqa: N815
    attributionMcpServer: str | None = None  # noqa: N815
    attributionAgent: str | None = None  # noqa: N815
    effort: str | None = None
    message: FastMessage | _AnyButObject = None
    data: FastData | _AnyButObject = None


FAST: Final = msgspec.json.Decoder(FastLine)
# float_hook: a float beyond double range (1e400) decodes to inf and is judged like
# any other wrong type, instead of failing the whole line as "out of range".
TOLERANT: Final = msgspec.json.Decoder(Line, float_hook=float)
