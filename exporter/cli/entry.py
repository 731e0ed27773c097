"""The console script: ``statusline`` without the command line's imports, the rest through it.

Claude Code starts the status-line command on every refresh; the full command
line imports pydantic, OpenTelemetry and rich, so ``claude-code-exporter
statusline`` is dispatched here, the one place that does, before any of that.
``[project.scripts]`` and ``python -m exporter`` both point at :func:`main`.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # collections.abc costs milliseconds at run time; annotations only
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """``statusline`` → exporter.cli.statusline; any other command → exporter.cli.commands.

    Without ``argv`` this process is the command (``sys.argv``): it runs
    through :func:`exporter.cli.startup.run`, which never returns.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["statusline"]:
        from exporter.cli import statusline  # the point of this module

        return statusline.main(words[1:], sys.stdin.buffer, sys.stdout.buffer, os.environ,
                               program=sys.argv[0] if argv is None else None)
    # Imported before startup.run freezes the heap: the command line's modules are what
    # the freeze is for.
    from exporter.cli import commands, startup

    if argv is None:
        startup.run(lambda: commands.main(words), words[0] if words else "")
    return commands.main(words)
