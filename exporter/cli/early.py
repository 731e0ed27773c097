"""The command line's guess for a head start, made before the CLI's modules are imported.

A ``report`` whose ledger does not exist yet reads every transcript: its
parsing can begin before the command has loaded (exporter.ingest.headstart).
This guesses what that pass will read without the settings model (pydantic
alone takes ~0.1 s to import): the ``--data-dir`` flags, else Claude Code's
default roots; the ledger under ``--state-dir``, else where the environment
puts the state directory.

A command whose scan the guess does not model gets no head start: a
``--config`` file, the scan's own options (flags or environment), ``--help``.
The command's scanner checks the guess anyway and stops a head start that
does not fit its pass, so a wrong guess costs the parsing begun, never a
figure.
"""

from __future__ import annotations

from pathlib import Path

from exporter.ingest.discover import present, transcript_dirs
from exporter.ingest.headstart import HeadStart, begin
from exporter.ingest.spool import default_state_dir
from exporter.ledger.schema import LEDGER_FILE

TYPE_CHECKING = False  # collections.abc costs milliseconds at run time; annotations only
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

# Flags after which the guess would be wrong or useless: settings from a file, the scan's
# options (exporter.cli.assemble.scan_options), a help text instead of a report.
_UNMODELLED_FLAGS = ("--config", "--workers", "--batch-mb", "-h", "--help")
# The same settings from the environment (exporter.cli.config's CLAUDE_CODE_EXPORTER_*).
_UNMODELLED_ENV = tuple(f"CLAUDE_CODE_EXPORTER_{name}" for name in (
    "DATA_DIRS", "WORKERS", "BATCH_MB", "MAX_LINE_BYTES"))


def head_start(argv: Sequence[str], environ: Mapping[str, str], home: Path, *,
               start: Callable[[list[Path]], HeadStart | None] = begin) -> HeadStart | None:
    """A head start for the command ``argv`` (without the program name), or None.

    Only a ``report`` into a ledger that does not exist yet gets one, and only
    when its pass would use parser processes (a big enough tree). ``start``
    begins it over the projects directories guessed.
    """
    if list(argv[:1]) != ["report"]:
        return None
    words = list(argv[1:])
    if any(word.split("=", 1)[0] in _UNMODELLED_FLAGS for word in words) \
            or any(environ.get(name, "").strip() for name in _UNMODELLED_ENV):
        return None
    states = _values(words, "--state-dir")
    state_dir = Path(states[-1]) if states else Path(default_state_dir(environ))
    if (state_dir / LEDGER_FILE).exists():
        return None  # a warm report: it reads what is new, which its ledger knows
    dirs = transcript_dirs([Path(v) for v in _values(words, "--data-dir")], environ, home)
    found = present(dirs)  # as the report walks them (exporter.cli.commands)
    return start(found) if found else None


def _values(words: Sequence[str], flag: str) -> list[str]:
    """Every value given to ``flag``, as ``flag VALUE`` or ``flag=VALUE``, in order."""
    out = []
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            out.append(words[i + 1])
        elif word.startswith(flag + "="):
            out.append(word[len(flag) + 1:])
    return out
