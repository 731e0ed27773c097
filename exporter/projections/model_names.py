"""A model id as people read it: ``claude-sonnet-4-5-20250929`` → ``sonnet-4-5``.

One rule for every place a model is named to a person (the report's tables,
the page): without the ``claude-`` prefix and the release date, visible and cut
like any name from a transcript (:func:`exporter.shown.clip`).
"""

from __future__ import annotations

import re
from typing import Final

from exporter.shown import clip

_DATE_SUFFIX: Final = re.compile(r"-\d{8}$")


def short_model(model: str) -> str:
    """The model id without ``claude-`` and its ``-YYYYMMDD`` date, visible and clipped."""
    return clip(_DATE_SUFFIX.sub("", model.removeprefix("claude-")))
