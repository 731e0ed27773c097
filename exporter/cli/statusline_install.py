"""``statusline --install`` / ``--uninstall``: the ``statusLine`` entry of Claude Code's settings.

Claude Code reads ``$CLAUDE_CONFIG_DIR/settings.json``, else
``~/.claude/settings.json``. The entry names the command by its absolute path
(the console script this process was started as, else this interpreter with
``-m exporter.cli.statusline``), because the install puts it in a virtual
environment that Claude Code's ``PATH`` may not include.

The settings file is the user's and hostile until checked: anything but a
JSON object (bad JSON, duplicate keys, NaN, a ``statusLine`` that is not an
object, a FIFO) is refused with exit 2 and nothing changed. Every other key is
kept in its order; a change is written to a temporary file and renamed over
the real one (through a symlink, to its target), after a timestamped backup.
A run that would change nothing writes nothing. A status line of the user's
own is kept: it is run through ``--then`` and restored by ``--uninstall``.

Imported only with these flags: the status line's refresh never loads it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from exporter.cli.exits import EXIT_CONFIG

MAX_SETTINGS = 8 << 20
SCRIPT_NAME = "claude-code-exporter"


class SettingsError(Exception):
    """The settings file cannot be edited safely (the message says why)."""


def settings_path(environ: Mapping[str, str]) -> str:
    """Claude Code's user settings file: ``$CLAUDE_CONFIG_DIR/settings.json`` or ``~/.claude``'s."""
    base = environ.get("CLAUDE_CONFIG_DIR", "").strip()
    if not base:
        home = environ.get("HOME", "").strip() or os.path.expanduser("~")
        base = os.path.join(home, ".claude")
    return os.path.join(os.path.expanduser(base), "settings.json")


def our_command(program: str | None, args: Sequence[str]) -> str:
    """The absolute command line Claude Code should run, with ``args`` after ``statusline``."""
    if program and os.path.basename(program) == SCRIPT_NAME and os.path.isfile(program):
        head = [os.path.abspath(program), "statusline"]
    else:  # python -m …: the interpreter of this install, which has the package
        head = [sys.executable, "-m", "exporter.cli.statusline"]
    return shlex.join([*head, *args])


def _words(command: str) -> list[str] | None:
    """A command line split as a shell would, or None when it does not parse."""
    try:
        return shlex.split(command)
    except ValueError:
        return None


def _is_ours(command: Any) -> bool:
    """True when a statusLine command is this status line (any install of it)."""
    words = _words(command) if isinstance(command, str) else None
    if not words:
        return False
    if os.path.basename(words[0]) == SCRIPT_NAME:
        return words[1:2] == ["statusline"]
    return "exporter.cli.statusline" in words[1:3]


def _then_of(command: str) -> str | None:
    """The ``--then`` command inside our own command line, if any."""
    words = _words(command) or []
    for n, word in enumerate(words):
        if word == "--then" and n + 1 < len(words):
            return words[n + 1]
        if word.startswith("--then="):
            return word.partition("=")[2]
    return None


def read_settings(path: str) -> tuple[dict[str, Any], bytes | None]:
    """The settings object and the file's bytes (None: no file yet); SettingsError if unsafe."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise SettingsError(f"cannot read it: {exc.strerror}") from None
    try:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SettingsError("it is not a regular file")
        if st.st_size > MAX_SETTINGS:
            raise SettingsError(f"it is larger than {MAX_SETTINGS} bytes")
        data = os.read(fd, MAX_SETTINGS + 1)
    finally:
        os.close(fd)
    return _parse(data), data


def _parse(data: bytes) -> dict[str, Any]:
    """The settings object from the file's bytes, refusing anything ambiguous."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise SettingsError("it has a key twice; which one Claude Code uses is unclear")
        return dict(items)

    def constant(name: str) -> Any:
        raise SettingsError(f"it is not JSON ({name} is not a JSON value)")

    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)
    except UnicodeDecodeError:
        raise SettingsError("it is not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        raise SettingsError(f"it is not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SettingsError("it is not a JSON object")
    if "statusLine" in doc and not isinstance(doc["statusLine"], dict):
        raise SettingsError("its statusLine is not an object; fix it by hand")
    return doc


def installed(doc: dict[str, Any], command: str) -> dict[str, Any]:
    """The settings with our statusLine: the user's own command kept through ``--then``."""
    entry = dict(doc.get("statusLine", {}))
    current = entry.get("command")
    if isinstance(current, str) and current.strip() and "--then" not in (_words(command) or []):
        # The user's own line keeps showing; a reinstall keeps the one already wrapped.
        then = _then_of(current) if _is_ours(current) else current
        if then is not None:
            command = f"{command} --then {shlex.quote(then)}"
    entry.update(type="command", command=command)
    return {**doc, "statusLine": entry}


def uninstalled(doc: dict[str, Any]) -> dict[str, Any]:
    """The settings without our statusLine (the user's own restored); unchanged if not ours."""
    entry = doc.get("statusLine")
    if not isinstance(entry, dict) or not _is_ours(entry.get("command")):
        return doc
    then = _then_of(entry["command"])
    if then is None:
        return {k: v for k, v in doc.items() if k != "statusLine"}
    return {**doc, "statusLine": {**entry, "command": then}}


def encode(doc: dict[str, Any]) -> bytes:
    """The settings as Claude Code writes them: two-space indents, UTF-8, a final newline."""
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def write_settings(path: str, data: bytes, old: bytes | None, now: float) -> str | None:
    """Back up ``old``, then replace the file (its target, if a link); return the backup's path."""
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    mode = 0o600
    backup = None
    if old is not None:
        mode = os.stat(target).st_mode & 0o777
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now))
        backup = _exclusive(f"{target}.bak-{stamp}", old, mode)
    tmp = _exclusive(f"{target}.tmp-{os.getpid()}", data, mode)
    try:
        os.replace(tmp, target)
    except OSError:
        os.unlink(tmp)
        raise
    return backup


def _exclusive(wanted: str, data: bytes, mode: int) -> str:
    """Write a new file at ``wanted`` (or ``wanted.N`` when taken), flushed to disk."""
    for n in range(100):
        path = wanted if n == 0 else f"{wanted}.{n}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        except FileExistsError:
            continue
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return path
    raise OSError(f"{wanted}: 100 files of that name already")


def run(flags: Mapping[str, Any], program: str | None, environ: Mapping[str, str],
        out: TextIO, err: TextIO, *, clock: Callable[[], float] = time.time) -> int:
    """Install or uninstall as ``flags`` say; 0 done (or nothing to do), 2 refused, 1 failed."""
    path = settings_path(environ)
    try:
        doc, old = read_settings(path)
    except SettingsError as exc:
        err.write(f"claude-code-exporter statusline: {path}: {exc}; nothing changed\n")
        return EXIT_CONFIG
    if flags["uninstall"]:
        new = uninstalled(doc)
    else:
        new = installed(doc, our_command(program, flags["args"]))
    if new == doc and old is not None:
        state = "already installed" if not flags["uninstall"] else "not installed"
        if flags["uninstall"] and "statusLine" in doc:
            state = "the statusLine there is not this command's; left alone"
        out.write(f"{path}: {state}; nothing changed\n")
        return 0
    if flags["uninstall"] and old is None:
        out.write(f"{path}: no settings file, not installed; nothing changed\n")
        return 0
    samples_dir = None if flags["uninstall"] else flags.get("samples_dir")
    return _apply(path, new, old, dry_run=flags["dry_run"], out=out, err=err, now=clock(),
                  samples_dir=samples_dir)


def _apply(path: str, new: dict[str, Any], old: bytes | None, *, dry_run: bool, out: TextIO,
           err: TextIO, now: float, samples_dir: str | None) -> int:
    """Write (or, dry run, show) the new settings."""
    entry = new.get("statusLine")
    shown = json.dumps({"statusLine": entry} if entry else {}, indent=2, ensure_ascii=False)
    if dry_run:
        out.write(f"would write to {path}:\n{shown}\n(dry run: nothing changed)\n")
        return 0
    try:
        backup = write_settings(path, encode(new), old, now)
        if samples_dir is not None:  # there before the first refresh: a bind mount's source
            os.makedirs(samples_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        err.write(f"claude-code-exporter statusline: {path}: {exc}; nothing changed\n")
        return 1
    saved = f" (previous settings saved as {backup})" if backup else ""
    out.write(f"wrote to {path}{saved}:\n{shown}\nClaude Code picks it up at its next "
              "refresh.\n")
    return 0
