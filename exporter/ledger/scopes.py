"""Which requests are in the scope of some transcript roots: a bitmask, an SQL filter.

A request is in scope when a file holding it was found under (or at) one of
the roots, also after the file was deleted; v1 requests, whose files were
never recorded, are in every scope. ``root_bits`` maps each root the ledger
knows to its bit in ``requests.roots``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from exporter.records import ALL_ROOTS


def folder_of(path: str, root: str) -> str:
    """The project folder of a transcript file: the first part of its path below its root.

    "" for a file straight in the root (or not below it): it has no folder.
    """
    top = root.rstrip("/") + "/"
    if not path.startswith(top):
        return ""
    rest = path[len(top):]
    return rest.split("/", 1)[0] if "/" in rest else ""


def inside(path: str, wanted: Sequence[str]) -> bool:
    """Whether a root's path is at or below one of the ``wanted`` absolute paths."""
    return any(path == w or path.startswith(w.rstrip("/") + "/") for w in wanted)


def absolute(roots: Sequence[str | Path]) -> list[str]:
    """The roots as absolute paths without a trailing slash (``/`` stays)."""
    return [os.path.abspath(os.fspath(r)).rstrip("/") or "/" for r in roots]


def root_ids(ids: dict[str, int], roots: Sequence[str | Path]) -> list[int]:
    """The ids (of ``ids``: path → id) of the roots at or below ``roots``."""
    wanted = absolute(roots)
    return sorted(rid for path, rid in ids.items() if inside(path, wanted))


def mask(root_bits: dict[str, int], roots: Sequence[str | Path] | None) -> int | None:
    """The ``requests.roots`` bits of the roots at or below ``roots`` (None: everything)."""
    if roots is None:
        return None
    wanted = absolute(roots)
    out = 0
    for path, bit in root_bits.items():
        if inside(path, wanted):
            out |= bit
    return out


def condition(root_bits: dict[str, int], roots: Sequence[str | Path] | None,
              column: str = "roots") -> str | None:
    """An SQL condition on a roots bitmask ``column``: in scope of ``roots`` (None: all)."""
    wanted = mask(root_bits, roots)
    if wanted is None:
        return None
    every = 0
    for bit in root_bits.values():
        every |= bit
    if wanted and wanted == every:
        return None
    return f"({column} & {wanted}) != 0" if wanted else f"{column} = {ALL_ROOTS}"
