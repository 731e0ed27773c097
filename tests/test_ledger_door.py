"""Only the ledger package opens the ledger file: no other module of exporter connects."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT

_ALLOWED = ("exporter/ledger/", "exporter/sqlite.py")


def _connects(path: Path) -> list[int]:
    """Lines of ``path`` that call ``connect`` on the SQLite driver (``sqlite3.connect``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "connect" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "sqlite3"):
            found.append(node.lineno)
    return found


def test_no_module_outside_the_ledger_opens_a_connection() -> None:
    """Every connection to the ledger file comes from exporter.ledger (a Ledger or connections)."""
    outside = {}
    for path in sorted((ROOT / "exporter").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if not name.startswith(_ALLOWED) and (lines := _connects(path)):
            outside[name] = lines
    assert outside == {}
