"""Label values for metrics: the project policy and hard cardinality caps.

Transcripts are input we do not control: a model id or a cwd could be long,
odd, or (in a hostile file) different on every line. Values are shortened,
and past a cap every new value becomes ``other``, so the number of series
stays bounded whatever the files say.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Final

MAX_VALUE_LEN: Final = 120
OTHER: Final = "other"


class LabelPolicy:
    """Maps models and project paths to bounded label values."""

    def __init__(self, project_policy: str = "basename", max_models: int = 64,
                 max_projects: int = 256) -> None:
        """``project_policy`` is ``basename``, ``full``, ``hash`` or ``none``."""
        self.project_policy = project_policy
        self._models: dict[str, str] = {}
        self._projects: dict[str, str] = {}
        self._max_models = max_models
        self._max_projects = max_projects

    def model(self, model: str) -> str:
        """The label value of a model id."""
        return _capped(self._models, model, self._max_models, lambda m: m or "unknown")

    def project(self, cwd: str) -> str:
        """The label value of a project directory under the policy."""
        return _capped(self._projects, cwd, self._max_projects, self._project_value)

    def _project_value(self, cwd: str) -> str:
        """Apply the project policy to one cwd."""
        if self.project_policy == "none":
            return ""
        if not cwd:
            return "unknown"
        if self.project_policy == "hash":
            return hashlib.sha256(cwd.encode("utf-8", "replace")).hexdigest()[:12]
        if self.project_policy == "full":
            return cwd
        return os.path.basename(cwd.rstrip("/")) or "/"


def _capped(seen: dict[str, str], raw: str, cap: int, make: Callable[[str], str]) -> str:
    """The cached value for ``raw``, or ``other`` once ``cap`` values exist."""
    value = seen.get(raw)
    if value is None:
        if len(seen) >= cap:
            return OTHER
        value = _clean(make(raw))
        seen[raw] = value
    return value


def _clean(value: str) -> str:
    """Printable, bounded text (control characters become '?')."""
    text = "".join(ch if ch.isprintable() else "?" for ch in value)
    return text if len(text) <= MAX_VALUE_LEN else text[: MAX_VALUE_LEN - 1] + "…"
