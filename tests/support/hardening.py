"""Helpers of the hardening tests: truth checks, ledger reads, privileges, cgroups, attacks.

The ``serve`` process these tests kill, demote or starve is
``tests.support.process.Serve``.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.exposition import total
from tests.support.ledgers import ledger_value
from tests.support.paths import ROOT
from tests.support.wait import poll

__all__ = [
    "NO_DAC", "Cgroup", "Slowloris", "can_drop_dac", "check_against_truth", "children",
    "integrity", "ledger_counter", "ledger_report", "peak_rss", "remove_tree", "threads",
]

# Root ignores file modes through these two capabilities; without them it obeys them.
NO_DAC = ["--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]


def check_against_truth(fams: dict[str, Any], truth: dict[str, Any]) -> list[str]:
    """Differences between a scrape and the generator's truth (requests, tokens, lines)."""
    want = truth["totals"]
    got = {
        "requests": total(fams, "claude_code_requests"),
        "unpriced_tokens": total(fams, "claude_code_unpriced_tokens"),
        "rejected_lines": total(fams, "claude_code_exporter_lines", result="rejected"),
        **{f"{t}_tokens": total(fams, "claude_code_tokens", type=t)
           for t in ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")},
    }
    expect = {**{k: want[k] for k in got if k in want}, "rejected_lines": truth["rejected_lines"]}
    diffs = [f"{k}: {got[k]} != {v}" for k, v in expect.items() if got[k] != v]
    for reason, n in truth["rejected_by_reason"].items():
        seen = total(fams, "claude_code_exporter_rejected_lines", reason=reason)
        if seen != n:
            diffs.append(f"rejected[{reason}]: {seen} != {n}")
    for source, t in truth["by_source"].items():
        seen = total(fams, "claude_code_requests", source=source)
        if seen != t["requests"]:
            diffs.append(f"requests[{source}]: {seen} != {t['requests']}")
    if abs(total(fams, "claude_code_cost_usd") - want["cost_usd"]) > 0.005:
        diffs.append(f"cost {total(fams, 'claude_code_cost_usd')} != {want['cost_usd']}")
    return diffs


def ledger_report(state: Path, tree: Path) -> Any:
    """`report --json` of what the ledger holds for ``tree``, reading none of its files.

    The tree is moved aside while the report runs: the report's scope is the
    tree's path (provenance outlives files), and there is nothing left to read.
    """
    aside = tree.with_name(tree.name + ".aside")
    tree.rename(aside)
    tree.mkdir()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(tree),
             "--state-dir", str(state), "--log-level", "error"],
            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
        )
    finally:
        tree.rmdir()
        aside.rename(tree)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def ledger_counter(state: Path, name: str, label: str = "") -> int:
    """One persistent counter, read from the ledger file directly (read-only)."""
    return int(ledger_value(state / "ledger.sqlite3",
                            "SELECT value FROM counters WHERE name=? AND label=?",
                            (name, label)) or 0)


def integrity(state: Path) -> str:
    """PRAGMA integrity_check of the ledger."""
    return str(ledger_value(state / "ledger.sqlite3", "PRAGMA integrity_check"))


def can_drop_dac() -> list[str] | None:
    """A command prefix under which file modes are enforced, or None if there is none.

    Not root: modes already apply (empty prefix). Root: ``setpriv`` without the
    DAC capabilities, checked on a mode-000 probe file.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"dac-probe-{os.getpid()}"
    probe.write_text("x")
    probe.chmod(0)
    try:
        proc = subprocess.run([setpriv, *NO_DAC, sys.executable, "-c",
                               f"open({str(probe)!r}).read()"], capture_output=True, check=False)
        return [setpriv, *NO_DAC] if b"PermissionError" in proc.stderr else None
    finally:
        probe.unlink()


class Cgroup:
    """A memory and task limit for one process tree, as a systemd unit's MemoryMax/TasksMax.

    Uses cgroup v2 when its controllers can be enabled, else v1's memory and
    pids hierarchies; ``prefix`` is empty when neither is available here (the
    caller then relies on its own measurements alone).
    """

    def __init__(self, name: str, *, memory: int | None = None, tasks: int | None = None):
        """Create the group (nothing is in it until a command runs under ``prefix``)."""
        self.dirs: list[Path] = []
        self._procs: list[Path] = []
        self.version = 0
        wanted = {"memory": memory, "pids": tasks}
        try:
            self._make(f"cce-{name}-{os.getpid()}", wanted)
        except OSError:
            self.close()
            self.dirs, self._procs, self.version = [], [], 0

    def _make(self, name: str, wanted: dict[str, int | None]) -> None:
        root = Path("/sys/fs/cgroup")
        needed = [c for c, v in wanted.items() if v is not None]
        if (root / "cgroup.controllers").is_file():  # v2 mounted at the top
            have = (root / "cgroup.controllers").read_text().split()
            if not set(needed) <= set(have):
                return
            (root / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in needed))
            group = root / name
            group.mkdir()
            self.dirs.append(group)
            if wanted["memory"] is not None:
                (group / "memory.max").write_text(str(wanted["memory"]))
                with contextlib.suppress(OSError):  # absent without swap accounting
                    (group / "memory.swap.max").write_text("0")
            if wanted["pids"] is not None:
                (group / "pids.max").write_text(str(wanted["pids"]))
            self._procs.append(group / "cgroup.procs")
            self.version = 2
            return
        mine = dict(line.split(":", 2)[1:] for line in
                    Path("/proc/self/cgroup").read_text().splitlines() if line.count(":") >= 2)
        for controller in needed:
            base = root / controller
            if not (base / "cgroup.procs").is_file():
                self.close()
                self.dirs, self._procs = [], []
                return
            group = base / mine.get(controller, "/").lstrip("/") / name
            group.mkdir()
            self.dirs.append(group)
            if controller == "memory":
                (group / "memory.limit_in_bytes").write_text(str(wanted["memory"]))
            else:
                (group / "pids.max").write_text(str(wanted["pids"]))
            self._procs.append(group / "cgroup.procs")
        self.version = 1

    @property
    def prefix(self) -> list[str]:
        """A command prefix that moves the command into the group, then runs it."""
        if not self._procs:
            return []
        script = 'for p in $CCE_PROCS; do echo $$ > "$p"; done; exec "$@"'
        return ["env", f"CCE_PROCS={' '.join(map(str, self._procs))}", "sh", "-c", script, "sh"]

    def oom_kills(self) -> int:
        """How many processes of the group the kernel killed for memory."""
        for group in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                f = group / name
                if f.is_file():
                    for line in f.read_text().splitlines():
                        if line.startswith("oom_kill "):
                            return int(line.split()[1])
        return 0

    def close(self) -> None:
        """Remove the group once its processes are gone (the caller has stopped them)."""
        for group in self.dirs:
            procs = group / "cgroup.procs"
            with contextlib.suppress(OSError):
                poll(lambda p=procs: not p.read_text().strip(), 10, f"{group} empty")  # type: ignore[misc]
                group.rmdir()


def peak_rss(pid: int) -> int:
    """The peak resident set of a running process, in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def threads(pid: int) -> int:
    """The number of threads of a running process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no Threads for {pid}")


def children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat_line[stat_line.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def remove_tree(top: Path) -> None:
    """``rm -r`` without recursion: shutil.rmtree recurses, and 990 levels are too deep for it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    stack, names = [os.open(top, flags)], [""]
    try:
        while stack:
            with os.scandir(stack[-1]) as it:
                entries = list(it)
            sub = next((e.name for e in entries if e.is_dir(follow_symlinks=False)), None)
            if sub is not None:
                stack.append(os.open(sub, flags, dir_fd=stack[-1]))
                names.append(sub)
                continue
            for entry in entries:
                os.unlink(entry.name, dir_fd=stack[-1])
            os.close(stack.pop())
            name = names.pop()
            if stack:
                os.rmdir(name, dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)
    os.rmdir(top)


class Slowloris:
    """``n`` connections that each send a request one byte at a time, reconnecting when cut.

    One round (a byte on every connection) every ``interval`` seconds.
    """

    def __init__(self, port: int, n: int, interval: float = 0.25) -> None:
        self.port, self.n, self.interval = port, n, interval
        self.sel = selectors.DefaultSelector()
        self.socks: dict[socket.socket, int] = {}
        self.stop = threading.Event()
        self.ticks = 0  # rounds of one byte on every connection so far
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", self.port))
        self.socks[sock] = 0
        self.sel.register(sock, selectors.EVENT_READ)

    def _close(self, sock: socket.socket) -> None:
        self.sel.unregister(sock)
        del self.socks[sock]
        sock.close()

    def _run(self) -> None:
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"z" * 4000
        next_tick = time.monotonic()
        while not self.stop.is_set():
            for key, _ in self.sel.select(timeout=max(0.0, next_tick - time.monotonic())):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    if sock.recv(4096):
                        continue
                except OSError:
                    pass
                self._close(sock)  # cut off by the server: replaced at the next tick
            if time.monotonic() < next_tick:
                continue
            next_tick = time.monotonic() + self.interval  # the trickle's pace
            while len(self.socks) < self.n:
                self._open()
            for sock, sent in list(self.socks.items()):
                try:
                    sock.send(request[sent % len(request):][:1])
                    self.socks[sock] = sent + 1
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    self._close(sock)
            self.ticks += 1
        for sock in list(self.socks):
            self._close(sock)
