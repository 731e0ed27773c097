"""The console script's first stop: ``statusline`` runs without importing the full CLI.

Claude Code starts the status-line command on every refresh; the full command
line imports pydantic, OpenTelemetry and rich (hundreds of milliseconds), so
``claude-code-exporter statusline`` is dispatched here before any of that.
Point ``[project.scripts]`` at :func:`main` to use it.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # collections.abc costs milliseconds at run time; annotations only
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """``statusline`` → exporter.statusline; anything else → exporter.cli."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["statusline"]:
        from exporter import statusline  # noqa: PLC0415 -- the point of this module

        return statusline.main(args[1:], sys.stdin.buffer, sys.stdout.buffer, os.environ)
    from exporter import cli  # noqa: PLC0415

    result: int = cli.main(args)
    return result
