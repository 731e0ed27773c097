"""A daemon started in-process over one transcript, driven one follower step at a time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporter.cli.assemble import daemon_parts
from exporter.cli.config import load_settings
from exporter.ingest.discover import projects_dirs
from exporter.serve.daemon import Daemon
from exporter.synth import GenOptions, generate
from tests.support.clock import Clock
from tests.support.exposition import total
from tests.support.live import LiveSession
from tests.support.logs import Log
from tests.support.records import assistant, jsonl

RESCAN = 30.0  # seconds between two rescans of the driven daemon


class Driven:
    """A started daemon over one transcript, with its clocks and its log."""

    def __init__(self, tmp: Path, history: int = 0) -> None:
        """Start over one transcript; ``history``: generated sessions beside it (seed 5)."""
        if history:
            generate(tmp / "claude", GenOptions(seed=5, sessions=history))
        self.session = tmp / "claude" / "projects" / "-home-u-proj" / "s1.jsonl"
        self.session.parent.mkdir(parents=True, exist_ok=True)
        self.session.write_bytes(jsonl(assistant("msg_1", "req_1")))
        settings = load_settings(
            {"data_dirs": [tmp / "claude"], "state_dir": tmp / "state", "poll": True,
             "listen": "127.0.0.1:0", "rescan_seconds": RESCAN, "settle_seconds": 0.0}, {})
        self.log = Log()
        self.clock = Clock(1_800_000_000.0)  # after the requests of assistant()
        self.mono = Clock(1000.0)
        parts = daemon_parts(settings, projects_dirs(settings.data_dirs), warn=print)
        self.daemon = Daemon(parts, self.log, registry=CollectorRegistry(), clock=self.clock,
                             monotonic=self.mono)
        self.daemon.start()

    def append(self, msg: str) -> None:
        """Claude Code appends one more request to the session."""
        with self.session.open("ab") as fh:
            fh.write(jsonl(assistant(msg, "req_" + msg)))

    def append_live(self, live: LiveSession) -> None:
        """Claude Code appends the live session's next request, timed by the daemon's clock."""
        ts = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        with self.session.open("ab") as fh:
            fh.write(live.line(ts + "Z"))

    def step(self) -> None:
        """One turn of the follower's loop."""
        self.daemon.follower.step(self.daemon.stop_event)

    def requests(self) -> float:
        """claude_code_requests_total as a scrape would read it now."""
        return total(generate_latest(self.daemon.registry).decode(), "claude_code_requests")
