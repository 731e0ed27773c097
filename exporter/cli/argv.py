"""An argument parser that suggests the nearest option or choice for a typo.

``--lisen 127.0.0.1:1`` fails with ``unrecognized arguments: --lisen …; did you
mean --listen?``, and ``report dayly`` with ``invalid choice: 'dayly' … did you
mean 'daily'?``. Python 3.14's ``suggest_on_error`` does the second for
choices; this does both on every supported Python (difflib, as 3.14 does).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
#: A negative UTC offset such as ``-12:00``: argparse takes it for an option (it is no
#: negative number to it), so ``--timezone -12:00`` would lack its value.
_NEGATIVE_OFFSET = re.compile(r"-\d{1,2}:\d{2}")


def glue_negative_values(args: Sequence[str]) -> list[str]:
    """``--opt -12:00`` as ``--opt=-12:00``, so the offset is the option's value."""
    out: list[str] = []
    for word in args:
        prev = out[-1] if out else ""
        if (_NEGATIVE_OFFSET.fullmatch(word) and prev.startswith("--") and "=" not in prev
                and prev != "--"):
            out[-1] = f"{prev}={word}"
        else:
            out.append(word)
    return out


def nearest(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate closest to ``word`` (difflib ratio at least 0.6), if any."""
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors name the nearest valid option or choice."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As ArgumentParser; subparsers made from it are Parsers too."""
        if sys.version_info >= (3, 14):  # pragma: no cover - the built-in, for choices
            kwargs.setdefault("suggest_on_error", True)
        super().__init__(*args, **kwargs)
        self._commands: dict[str, Parser] = {}
        self._argv: list[str] = []
        self._root: Parser = self

    def add_command(self, sub: Any, name: str, **kwargs: Any) -> Parser:
        """Add a subcommand parser and remember it for suggestions."""
        parser: Parser = sub.add_parser(name, **kwargs)
        parser._root = self
        self._commands[name] = parser
        return parser

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """Parse, and name the nearest option of the chosen subcommand for an unknown one."""
        self._argv = glue_negative_values(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(self._argv, namespace)
        if extras:
            target = self._commands.get(getattr(parsed, "command", "") or "", self)
            target.error(f"unrecognized arguments: {' '.join(extras)}{target.hint(extras)}")
        return parsed

    def hint(self, extras: Sequence[str]) -> str:
        """``; did you mean --x?`` for the first unknown option that is near a known one."""
        options = [o for action in self._actions for o in action.option_strings
                   if o.startswith("--")]
        for word in extras:
            if word.startswith("-"):
                near = nearest(word.split("=", 1)[0], options)
                if near:
                    return f"; did you mean {near}?"
        return ""

    def unknown_options(self) -> list[str]:
        """Options in the command line that this parser does not know."""
        known = {o for action in self._actions for o in action.option_strings}
        return [w for w in self._root._argv
                if w.startswith("--") and w.split("=", 1)[0] not in known]

    def error(self, message: str) -> NoReturn:
        """Print the message (with a suggestion for a mistyped choice) and --help's name; exit 2.

        An unknown option comes first: its value would otherwise be taken for a
        positional argument (``report --sinse 7d`` is not the view "7d").
        """
        unknown = self.unknown_options()
        if unknown and "unrecognized arguments" not in message:
            message = f"unrecognized arguments: {unknown[0]}{self.hint(unknown)}"
        match = _CHOICE.search(message)
        if match and "meant" not in message:  # 3.14's suggest_on_error says "maybe you meant"
            choices = [c.strip().strip("'") for c in match.group(2).split(",")]
            near = nearest(match.group(1), choices)
            if near:
                message = f"{message}; did you mean {near!r}?"
        # The error and where the options are, not the usage: for `report` that is 14
        # lines, and the one that matters would scroll by under them.
        self.exit(2, f"{self.prog}: error: {message}\nTry '{self.prog} --help' for the options.\n")
