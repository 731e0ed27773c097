"""Model id normalisation: provider prefixes, version and date suffixes removed.

Linear in the id's length and bounded: an id is cut to ``MAX_MODEL_ID``
characters before any work, and suffixes are stripped from the end with a
fixed-size window, so an id made of thousands of ``-v1`` costs no more than a
short one (a regex substitution anchored at ``$`` in a loop was quadratic).
"""

from __future__ import annotations

import re
from typing import Final

# Real ids are under 60 characters ("global.anthropic.claude-sonnet-4-5-20250929-v1:0");
# anything longer is not a model we can price, and the bound caps the work per id.
MAX_MODEL_ID: Final = 200

# "anthropic/" (OpenRouter style) or a Bedrock "anthropic." with an optional region
# profile ("us.", "eu.", "apac.", "global.", "us-gov.", ...).
_PREFIX = re.compile(r"^(?:anthropic/|(?:[a-z]{2,6}(?:-[a-z]{2,6})?\.)?anthropic\.)")
# One suffix at the very end; stripped repeatedly, so "…-20250929-v1:0" and
# "…-v2@20241022" both go. Every alternative is at most _WINDOW characters long.
_SUFFIX = re.compile(
    r"(?:\[1m\]|-v\d{1,4}(?::\d{1,4})?|@\d{8}|-\d{8}|-\d{4}-\d{2}-\d{2}|-latest)$"
)
_WINDOW: Final = 16
_DOTTED_VERSION = re.compile(r"(?<=\d)\.(?=\d)")  # "claude-sonnet-4.5" (OpenRouter style)
# A family key: "claude-" and a name with at least one digit (a version).
_FAMILY = re.compile(r"claude-[a-z0-9-]*\d[a-z0-9-]*")


def normalise_model_id(model: str) -> str:
    """Return the family form of a model id: lowercase, prefixes and suffixes removed.

    The id is cut to ``MAX_MODEL_ID`` characters first; the work is linear in that.
    """
    name = _PREFIX.sub("", model[: MAX_MODEL_ID + 8].strip().lower()[:MAX_MODEL_ID])
    end = len(name)
    while end:
        # Search only the last _WINDOW characters: ``endpos`` makes ``$`` match at ``end``,
        # so each step is O(_WINDOW) and no copy is made until the end.
        found = _SUFFIX.search(name, max(0, end - _WINDOW), end)
        if found is None or found.start() == found.end():
            break
        end = found.start()
    return _DOTTED_VERSION.sub("-", name[:end])


def is_family_key(name: str) -> bool:
    """Whether ``name`` could be a family key: normalised, ``claude-`` and a version."""
    return _FAMILY.fullmatch(name) is not None and normalise_model_id(name) == name
