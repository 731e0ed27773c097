"""Child processes of the tests, and ``serve`` as a real process on loopback.

Every child runs in its own process group (``kill -9`` takes its whole tree),
writes stdout and stderr to a log file, and is killed and reaped when the test
run exits even if a test forgot to stop it.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.exposition import Families, families, total
from tests.support.net import LOOPBACK, free_port, http_get
from tests.support.paths import ROOT
from tests.support.wait import poll


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0, *, group: bool = False) -> int:
    """SIGTERM, wait ``timeout`` s, then SIGKILL (the whole group if ``group``); the exit code.

    A process that had to be killed returns -9, which no test takes for a clean stop.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
            proc.wait(timeout=timeout)
    return int(proc.returncode)


Cleanup = Callable[[Callable[[], object]], None]
"""Registers a stop (a process's, a server's) to run when a stack of them is torn down."""


@contextlib.contextmanager
def stopping() -> Iterator[Cleanup]:
    """A place to register stops; on exit each runs, the last registered first, errors ignored."""
    stops: list[Callable[[], object]] = []
    try:
        yield stops.append
    finally:
        for stop_one in reversed(stops):
            with contextlib.suppress(Exception):
                stop_one()


class Process:
    """A child process in its own process group, its output in ``log_path``."""

    def __init__(self, argv: Sequence[str], log_path: Path, *,
                 env: Mapping[str, str] | None = None, cwd: Path = ROOT) -> None:
        """Start ``argv``; ``env`` is its whole environment (None: this one's)."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.argv = list(argv)
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cwd, env=None if env is None else dict(env), start_new_session=True,
        )
        atexit.register(self._reap)  # never outlive the test run

    def _reap(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.proc.poll() is None

    def answers(self, url: str, headers: Mapping[str, str] | None = None,
                context: ssl.SSLContext | None = None) -> bool:
        """True once ``url`` answers 200; fails at once if the process has exited."""
        if not self.alive():
            raise AssertionError(f"{self.argv[0]} exited {self.proc.returncode}: {self.log()}")
        return http_get(url, headers=headers, timeout=5, context=context)[0] == 200

    def log(self) -> str:
        """Everything the process wrote so far."""
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines, decoded (other lines skipped)."""
        out = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    def kill9(self) -> None:
        """SIGKILL the whole process group and reap it."""
        self._reap()
        self._log.close()
        atexit.unregister(self._reap)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait, return the exit code (the group is SIGKILLed after ``timeout`` s)."""
        code = stop(self.proc, timeout, group=True)
        self._log.close()
        atexit.unregister(self._reap)
        return code


class Serve(Process):
    """One ``claude-code-exporter serve`` process with its own state dir and log, on loopback.

    ``prefix`` goes before the command (``setpriv`` to drop root's file-access
    capabilities, a cgroup); ``port`` reuses a port (a restart is the same
    target); ``scheme``, ``auth`` and ``context`` are how to reach it.
    """

    def __init__(
        self, data: Path | Sequence[Path], state: Path, *extra: str,
        env: Mapping[str, str] | None = None, prefix: Sequence[str] = (), port: int | None = None,
        wait: bool = True, scheme: str = "http", auth: tuple[str, str] | None = None,
        context: ssl.SSLContext | None = None, settle: str = "0.2", logs: Path | None = None,
    ) -> None:
        """Start it (``env`` adds to this environment); with ``wait``, until /healthz is 200."""
        self.port = port or free_port()
        self.url = f"{scheme}://{LOOPBACK}:{self.port}"
        self.auth, self.context = auth, context
        dirs = [data] if isinstance(data, Path) else list(data)
        args = [*prefix, sys.executable, "-m", "exporter", "serve",
                *(a for d in dirs for a in ("--data-dir", str(d))), "--state-dir", str(state),
                "--listen", f"{LOOPBACK}:{self.port}", "--settle-seconds", settle,
                "--log-format", "json", *extra]
        log_path = (logs or state.parent) / f"serve-{self.port}.log"
        super().__init__(args, log_path, env={**os.environ, **(env or {})})
        if wait:
            poll(self._healthy, 60, "serve /healthz")

    def _headers(self) -> dict[str, str]:
        if self.auth is None:
            return {}
        token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def _healthy(self) -> bool:
        return self.answers(self.url + "/healthz", self._headers(), self.context)

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        """Status and body of one GET (HTTP errors are returned, not raised)."""
        return http_get(self.url + path, headers={**self._headers(), **(headers or {})},
                        timeout=10, context=self.context)

    def health(self) -> tuple[int, dict[str, Any]]:
        """/healthz status and document."""
        status, body = self.get("/healthz")
        return status, json.loads(body) if body.startswith(b"{") else {}

    def scrape(self) -> Families:
        """Metric families by name from one real scrape of /metrics."""
        status, body = self.get("/metrics")
        assert status == 200, (status, body[:200])
        return families(body.decode())

    def requests(self) -> float:
        """claude_code_requests_total summed over all series."""
        return total(self.scrape(), "claude_code_requests")
