"""Run `claude-code-exporter serve` as a real process on loopback, and scrape it."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def poll(check: Callable[[], T | None], deadline_s: float = 30.0, what: str = "") -> T:
    """Call ``check`` until it returns something truthy or the deadline passes."""
    end = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < end:
        try:
            got = check()
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        else:
            if got:
                return got
            last = got
        time.sleep(0.05)  # polling interval inside a deadline loop
    raise AssertionError(f"timed out waiting for {what or check}: last={last!r}")


class Daemon:
    """A serve process with its own state dir, port and log file."""

    def __init__(self, data: Path, state: Path, *extra: str, env: dict[str, str] | None = None,
                 port: int | None = None):
        self.port = port or free_port()  # a restart passes the old port: the same target
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = state.parent / f"daemon-{self.port}.log"
        state.parent.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "exporter.cli", "serve", "--data-dir", str(data),
                "--state-dir", str(state), "--listen", f"127.0.0.1:{self.port}",
                "--settle-seconds", "0.2", "--log-format", "json", *extra]
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        atexit.register(self._reap)  # never outlive the test run, even if a test forgot stop()
        poll(self._healthy, 60, "daemon /healthz")

    def _reap(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited {self.proc.returncode}: {self.log()}")
        with urllib.request.urlopen(self.url + "/healthz", timeout=5) as resp:
            return bool(resp.status == 200)

    def log(self) -> str:
        """Everything the daemon logged so far."""
        return self.log_path.read_text(errors="replace")

    def scrape(self) -> dict[str, Any]:
        """Families by name from one real HTTP scrape of /metrics."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return {f.name: f for f in text_string_to_metric_families(text)}

    def stop(self) -> int:
        """SIGTERM, wait, return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def total(families: dict[str, Any], family: str, sample: str | None = None,
          **match: str) -> float:
    """Sum of a family's samples named ``sample`` whose labels include ``match``."""
    fam = families[family]
    name = sample or (fam.name + "_total" if fam.type == "counter" else fam.name)
    return float(sum(s.value for s in fam.samples
                     if s.name == name and all(s.labels.get(k) == v for k, v in match.items())))


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def counter_samples(families: dict[str, Any]) -> Samples:
    """Every monotonic sample (counters, histogram buckets/counts/sums) by name and labels."""
    out = {}
    for fam in families.values():
        if fam.type in ("counter", "histogram"):
            for s in fam.samples:
                if not s.name.endswith("_created"):
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
