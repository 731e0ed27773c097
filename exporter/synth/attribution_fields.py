"""Attribution fields for generated requests, and what the exporter must make of them.

With ``GenOptions.attribution`` every line of a request written by Claude Code
2.1.x carries the request's ``attributionSkill``, ``attributionPlugin``,
``attributionAgent`` and ``effort`` (each present or not), and
``attributionMcpServer`` on every line but the first of a streamed response
(a blank copy must never hide the name: docs/figures.md, "Attribution"). The
values hash from the message id, as ``synth.iterations`` does its shapes: no
draw from the random stream, so the rest of a tree is the same without them.
An advisor consultation (same message id) carries its line's values.
"""

from __future__ import annotations

import zlib
from typing import Final

from exporter.synth.model import SimRequest

SKILLS: Final = ("conventional-commit", "entire:commit-push-pr", "tdd")
MCP_SERVERS: Final = ("github", "playwright")
AGENTS: Final = ("general-purpose", "Explore")
EFFORTS: Final = ("low", "medium", "high", "xhigh")
FIELDS: Final = ("skill", "plugin", "mcp_server", "agent", "effort")  # records.ATTRIBUTION
_LINE_NAMES: Final = ("attributionSkill", "attributionPlugin", "attributionMcpServer",
                      "attributionAgent", "effort")


def _pick(req: SimRequest, salt: str, values: tuple[str, ...], tenths: int) -> str:
    """One of ``values`` for ``tenths`` requests in ten, else "" (a hash of the message id)."""
    h = zlib.crc32(f"{salt}:{req.msg_id}".encode())
    return values[(h // 10) % len(values)] if h % 10 < tenths else ""


def labels(req: SimRequest) -> tuple[str, str, str, str, str]:
    """The request's skill, plugin, MCP server, agent and effort ("" for absent)."""
    if not req.attribution or req.legacy_usage:
        return ("", "", "", "", "")
    skill = _pick(req, "skill", SKILLS, 6)
    plugin = "entire" if skill.startswith("entire:") else _pick(req, "plugin",
                                                                ("skill-creator",), 1)
    return (skill, plugin, _pick(req, "mcp", MCP_SERVERS, 3), _pick(req, "agent", AGENTS, 3),
            _pick(req, "effort", EFFORTS, 8))


def fields(req: SimRequest, line: int, lines: int) -> dict[str, str]:
    """The top-level fields of line ``line`` (of ``lines``) of ``req``'s streamed response."""
    out = {}
    for i, (name, value) in enumerate(zip(_LINE_NAMES, labels(req), strict=True)):
        if value and not (i == 2 and line == 0 and lines > 1):  # MCP: not on the first line
            out[name] = value
    return out
