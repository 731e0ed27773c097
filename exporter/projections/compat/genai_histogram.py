"""``gen_ai.client.token.usage``: the OpenTelemetry GenAI token histogram, per request.

Followed: semantic conventions v1.41.0 (the last release that carries the
GenAI documents in open-telemetry/semantic-conventions; they have since moved
to their own repository). Status there: **Development**, so names may still
change; docs/compat.md tracks it.

What the conventions say, and how a transcript request maps onto it:

- instrument: histogram, unit ``{token}``, explicit bucket boundaries
  1, 4, 16, ..., 4**13 (:data:`BOUNDS`); one measurement per operation and
  token type; attributes ``gen_ai.operation.name`` (``chat``: the Messages
  API), ``gen_ai.provider.name`` (``anthropic``), ``gen_ai.token.type``
  (``input`` / ``output``), ``gen_ai.request.model`` (and the recommended
  ``gen_ai.response.model``: the transcript holds the model id the API
  answered with, which for Anthropic's API is the id requested);
- cache tokens: Anthropic's ``input_tokens`` excludes cached tokens, and the
  conventions' Anthropic page says ``gen_ai.usage.input_tokens = input_tokens +
  cache_read_input_tokens + cache_creation_input_tokens``. So the ``input``
  measurement of a request is its whole prompt (input + cache read + both cache
  writes, :attr:`Request.context`), the ``output`` measurement its output tokens.

A request's two measurements are a counting rule (:func:`observations`): the
ledger keeps their bucket counts in its histogram rollups, in the same
transaction as the rows, whether or not ``--compat genai`` is on, so that
every process opening the ledger uses the same rules and turning the family
on needs no recount. This module imports only :mod:`exporter.records`.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Final

from exporter.records import HistSeries, Request

NAME: Final = "gen_ai.client.token.usage"
UNIT: Final = "{token}"
DESCRIPTION: Final = ("Tokens per request by token type; input includes cache reads and "
                      "cache writes.")
BOUNDS: Final[tuple[int, ...]] = tuple(4**i for i in range(14))  # 1 ... 67108864
INPUT: Final = "input"
OUTPUT: Final = "output"
OPERATION: Final = "chat"
PROVIDER: Final = "anthropic"

Observation = tuple[HistSeries, int, int]  # series, bucket index, value
Labels = tuple[tuple[str, str], ...]


def series(model: str, token_type: str) -> HistSeries:
    """The raw series of one model and token type (the type rides in ``arch``)."""
    return HistSeries(NAME, model, 0, token_type)


def bucket(value: int) -> int:
    """The explicit bucket of ``value``: inclusive upper bounds, the last is +Inf."""
    return bisect_left(BOUNDS, value)


def observations(req: Request) -> list[Observation]:
    """The two measurements of a settled request: its whole prompt, and its output."""
    prompt = req.context
    return [(series(req.model, INPUT), bucket(prompt), prompt),
            (series(req.model, OUTPUT), bucket(req.output), req.output)]


def attributes(model_label: str, token_type: str) -> Labels:
    """The conventions' attributes of one series (``model_label``: under the label policy)."""
    return (("gen_ai.operation.name", OPERATION), ("gen_ai.provider.name", PROVIDER),
            ("gen_ai.request.model", model_label), ("gen_ai.response.model", model_label),
            ("gen_ai.token.type", token_type))


def facts() -> dict[str, object]:
    """What the stored rollups depend on, for the counting rules' fingerprint."""
    return {"name": NAME, "bounds": list(BOUNDS), "input": "context", "output": "output"}
