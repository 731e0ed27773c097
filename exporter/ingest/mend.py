"""Mending a transcript line that is not JSON only because of lone surrogate escapes.

Claude Code is JavaScript: a string cut in the middle of an emoji is written
with a lone surrogate escape (the high half of a pair, escaped, and no low
half after it), which msgspec refuses, as it should: such a string cannot
be stored or encoded. Each lone escape becomes U+FFFD's (six bytes for six);
escaped pairs, and text that only looks like an escape (an escaped
backslash before the ``u``), are left alone.
"""

from __future__ import annotations

import re
from typing import Final

# A \\uXXXX escape of a surrogate (an odd run of backslashes before the u): a high one and
# the low one after it (a pair, kept), or a lone one (group 2 alone, mended to U+FFFD).
_SURROGATE_ESCAPE: Final = re.compile(
    rb"(?<!\\)((?:\\\\)*\\u)([dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|[dD][c-fC-F][0-9a-fA-F]{2})")


def mended(line: bytes) -> bytes | None:
    """``line`` with each lone surrogate escape made U+FFFD's; None if it has none."""
    if b"\\u" not in line:
        return None
    fixed = _SURROGATE_ESCAPE.sub(_mend_one, line)
    return None if fixed == line else fixed


def _mend_one(match: re.Match[bytes]) -> bytes:
    """One surrogate escape: a pair as it is, a lone one as U+FFFD (six bytes either way)."""
    escape = match.group(2)
    return match.group(0) if len(escape) > 4 else match.group(1) + b"fffd"
