r"""Strings from transcripts, made safe to show: data, never markup, terminal codes or formulas.

Model ids, project paths and session ids come from transcript lines, and a
transcript line is outside input: it can hold ``[/bold]`` (rich markup), an
escape sequence (clear the screen, set the window title, an OSC 8 hyperlink)
or ``=HYPERLINK(…)`` (a spreadsheet formula). Every renderer passes such a
string through one of the helpers here, at the point it becomes output:

- :func:`visible` writes each control character as its escape, ``ESC`` as the
  four characters ``\x1b``: C0 and C1 controls, DEL, lone surrogates (which
  cannot be encoded, so would stop the output), and the invisible characters that
  reorder or break text (bidirectional overrides and isolates, line and
  paragraph separators). A literal backslash is left as it is.
- :func:`clip` is the visible string cut to :data:`NAME_CHARS` characters (``…``
  marks the cut), for a name in a table: a megabyte model id is a table cell, not a page.
- :func:`text` is a rich ``Text`` of the visible string, so a table cell is
  never parsed as markup or emoji codes.
- :func:`markup` is the visible string escaped for a rich markup string.
- :func:`csv_cell` neutralises a CSV cell that a spreadsheet would run as a
  formula (OWASP, "CSV Injection"): a cell starting with ``=``, ``+``, ``-``,
  ``@``, tab, carriage return or line feed, or their full-width forms, gets a
  leading ``'``. Numbers stay numbers (a negative cost is not a formula).

The JSON outputs keep every string as it is: the JSON encoder escapes control
characters, and a program reading JSON wants the exact value.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # rich is imported where tables are drawn: `report --json` never needs it
    from rich.text import Text

# C0, DEL and C1 controls; lone surrogates; bidi embeddings, overrides and isolates,
# marks, line and paragraph separators (U+2028/2029 break a line in some terminals).
_HIDDEN: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
#: The longest name a table shows whole (real model ids and project folders are far shorter).
NAME_CHARS: Final = 60
#: How a spreadsheet recognises a formula: its first character (ASCII and full width).
FORMULA_START: Final = frozenset("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")


def _escaped(match: re.Match[str]) -> str:
    r"""One hidden character as ``\xNN`` (below U+0100) or ``\uNNNN``."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: str) -> str:
    """``value`` with every control or invisible reordering character written as its escape."""
    return _HIDDEN.sub(_escaped, value)


def clip(value: str, limit: int = NAME_CHARS) -> str:
    """The visible string, cut to ``limit`` characters with ``…`` where it was cut."""
    shown = visible(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def text(value: str) -> Text:
    """A rich ``Text`` of the visible string: shown as it reads, never parsed as markup."""
    from rich.text import Text  # noqa: PLC0415 - see the TYPE_CHECKING import

    return Text(visible(value))


def markup(value: str) -> str:
    """The visible string escaped for use inside a rich markup string."""
    from rich.markup import escape  # noqa: PLC0415 - see the TYPE_CHECKING import

    return escape(visible(value))


def csv_cell(value: Any) -> Any:
    """A CSV cell: strings visible and never a formula; numbers, booleans and None as they are."""
    if not isinstance(value, str):
        return value
    shown = visible(value)
    return "'" + shown if shown[:1] in FORMULA_START else shown
