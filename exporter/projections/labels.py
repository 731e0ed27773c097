"""Label values for metrics: the project policy and hard cardinality caps.

Transcripts are input we do not control: a model id or a cwd could be long,
odd, or (in a hostile file) different on every line. Values are shortened,
and past a cap every new value becomes ``other``, so the number of series
stays bounded whatever the files say. The caps are sized with every family's
worst case in mind (:mod:`exporter.projections.cardinality`): a series exists
per model × project × source (× type), so their product is what Prometheus
holds in the worst case.

A session started in a home directory has that directory as its cwd, and
its base name is the user name: under the ``basename`` policy such a cwd
(the user's own home, ``/root``, or ``/home/<name>`` and ``/Users/<name>``)
is labelled ``~`` instead.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from typing import Final

from exporter.projections.project_groups import ProjectGroups

MAX_VALUE_LEN: Final = 120
MAX_MODELS: Final = 16
"""Named models; the next ones are ``other``. A year of Claude Code uses a handful."""
MAX_PROJECTS: Final = 64
"""Named projects; the next ones are ``other`` (the report keeps every project apart)."""
MAX_CODEX_MODELS: Final = 8
"""Named Codex models (a cap of their own: Codex's names never take Claude Code's places)."""
OTHER: Final = "other"
HOME: Final = "~"
_HOME_DIR = re.compile(r"^(?:/home/[^/]+|/Users/[^/]+|/root|/var/root)$")


class LabelPolicy:
    """Maps models and project paths to bounded label values."""

    def __init__(self, project_policy: str = "basename", max_models: int = MAX_MODELS,
                 max_projects: int = MAX_PROJECTS, home: str | None = None,
                 groups: ProjectGroups | None = None) -> None:
        """``project_policy`` is ``basename``, ``full``, ``hash`` or ``none``.

        ``home`` is this user's home directory (default: ``~`` expanded).
        ``groups``: which project a cwd belongs to (default: its own); the
        policy applies to the project's path, a leading part of the cwd.
        """
        self.project_policy = project_policy
        self.groups = groups or ProjectGroups("cwd")
        self._home = (home if home is not None else os.path.expanduser("~")).rstrip("/")
        self._models: dict[str, str] = {}
        self._projects: dict[str, str] = {}
        self._max_models = max_models
        self._max_projects = max_projects

    def model(self, model: str) -> str:
        """The label value of a model id."""
        return _capped(self._models, model, self._max_models, lambda m: m or "unknown")

    def project(self, cwd: str) -> str:
        """The label value of a working directory's project under the policy."""
        return _capped(self._projects, self.groups.of(cwd), self._max_projects,
                       self._project_value)

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
        path = cwd.rstrip("/")
        if path and (path == self._home or _HOME_DIR.match(path)):
            return HOME  # a home directory's name is a user name, not a project
        return os.path.basename(path) or "/"


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
