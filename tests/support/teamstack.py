"""A team on one machine: N exporters → one Prometheus → remote write → VictoriaMetrics.

Everything is a real process on 127.0.0.1:

- one ``claude-code-exporter serve`` per member (``tests.support.process.Serve``), each
  over its own generated tree (``exporter.synth.generate``, which also writes the
  tree's ``truth.json``) with its own state directory and port. A member may read
  a byte copy of another member's tree instead: a ``~/.claude`` synced between
  two machines;
- one Prometheus scraping every exporter in the shipped ``claude-code`` job, one
  target per exporter with ``user`` and ``team`` target labels, with the shipped
  recording, alerting and team rules, remote-writing everything it stores to
- one VictoriaMetrics (``tests.support.vmserver.VMServer``), where the team queries run.

The Prometheus config is the shipped one (``deploy/prometheus/prometheus.yml``)
with these changes, all listed in ``prometheus_config()``: the exporter job's
targets and labels, absolute rule paths, the scrape and evaluation intervals
(1 s in tests, the shipped 15 s / 1 m in the benchmark), a ``remote_write``
section, and no blackbox job or Alertmanager (neither runs here). A test may
shorten the ``for:`` of ``ClaudeCodeExporterDown`` (shipped: 5m) in a copy of the
alerts file, so that the alert fires within seconds.

``tests/test_teams.py`` runs it with 10 exporters, ``bench/teams.py`` with 50.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from exporter.synth import GenOptions, generate
from tests.support.exposition import total
from tests.support.net import LOOPBACK
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.prometheus import PromServer, require_binary
from tests.support.vmserver import VMServer
from tests.support.wait import poll

PROM_DIR = ROOT / "deploy" / "prometheus"
SHIPPED_CONFIG = PROM_DIR / "prometheus.yml"
RULES_DIR = PROM_DIR / "rules"
ALERTS_FILE = RULES_DIR / "claude-code-alerts.yml"
TEAM_FILE = RULES_DIR / "claude-code-team.yml"
JOB = "claude-code"
DOWN_ALERT = "ClaudeCodeExporterDown"


@dataclass(frozen=True)
class Spec:
    """One exporter of the team: who, which team, which tree, which settings."""

    user: str
    team: str
    seed: int  # generator seed of its tree
    copy_of: int | None = None  # index of the member whose tree this one is a synced copy of
    budget_day_usd: float = 0.0
    project_label: str = "basename"


@dataclass
class Member:
    """A running exporter of the team and the ground truth of its tree."""

    spec: Spec
    tree: Path
    state: Path
    truth: dict[str, Any]
    daemon: Serve
    appended: int = 0  # requests a test added to the tree after it was generated

    @property
    def expected_requests(self) -> int:
        """Requests the ledger must hold: the generated ones and those appended since."""
        return int(self.truth["totals"]["requests"]) + self.appended

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``: the scrape target and its ``instance`` label."""
        return f"{LOOPBACK}:{self.daemon.port}"

    def start(self) -> Serve:
        """(Re)start the exporter on the member's port with its state directory."""
        self.daemon = start_daemon(self.spec, self.tree, self.state, port=self.daemon.port)
        return self.daemon

    def stop(self) -> None:
        """Stop the current exporter process (the one of the latest ``start``)."""
        self.daemon.stop()

    def kill(self) -> None:
        """SIGKILL the exporter, as a crash or a power cut would."""
        self.daemon.proc.kill()
        self.daemon.proc.wait(timeout=30)
        self.daemon.stop()  # closes the log file; the process is gone already


@dataclass
class TeamStack:
    """The running exporters, Prometheus and VictoriaMetrics."""

    base: Path
    members: list[Member]
    prom: PromServer
    vm: VMServer
    rule_files: list[Path] = field(default_factory=list)

    def selector(self, member: Member) -> str:
        """The label matchers of one exporter's series."""
        return f'job="{JOB}", instance="{member.address}"'


def start_daemon(spec: Spec, tree: Path, state: Path, port: int | None = None) -> Serve:
    """One ``serve`` process over ``tree`` with the spec's settings."""
    args = ["--project-label", spec.project_label, "--log-level", "warning"]
    if spec.budget_day_usd:
        args += ["--budget-day-usd", str(spec.budget_day_usd)]
    return Serve(tree, state, *args, port=port)


def make_trees(base: Path, specs: Sequence[Spec], gen: Callable[[int], GenOptions]) -> list[Path]:
    """Generate each member's tree (or copy the one it syncs); return the roots."""
    roots: list[Path] = []
    for i, spec in enumerate(specs):
        root = base / f"home-{i:02d}-{spec.user}" / ".claude"
        if spec.copy_of is not None:
            shutil.copytree(roots[spec.copy_of], root)  # a synced ~/.claude: the same bytes
        else:
            generate(root, gen(spec.seed))
        roots.append(root)
    return roots


def small_tree(seed: int) -> GenOptions:
    """A small tree (one session, a few dozen requests) whose history ended yesterday."""
    start = (datetime.now(UTC) - timedelta(days=2)).replace(microsecond=0)
    return GenOptions(seed=seed, sessions=1, requests_per_session=30, start=start)


def alerts_copy(directory: Path, down_for: str | None) -> Path:
    """The shipped alerts file, or a copy whose ``ClaudeCodeExporterDown`` waits ``down_for``."""
    if down_for is None:
        return ALERTS_FILE
    doc = yaml.safe_load(ALERTS_FILE.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == DOWN_ALERT]
    if len(rules) != 1:
        raise RuntimeError(f"{ALERTS_FILE} has {len(rules)} {DOWN_ALERT} rules")
    rules[0]["for"] = down_for
    path = directory / "claude-code-alerts-short-down.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def rule_files(directory: Path, down_for: str | None) -> list[Path]:
    """The shipped rule files, absolute, the alerts file possibly a copy (``alerts_copy``)."""
    shipped = yaml.safe_load(SHIPPED_CONFIG.read_text())["rule_files"]
    paths = [(SHIPPED_CONFIG.parent / p).resolve() for p in shipped]
    return [alerts_copy(directory, down_for) if p == ALERTS_FILE else p for p in paths]


def prometheus_config(members: Sequence[Member], rules: Sequence[Path], remote_write_url: str,
                      *, scrape_interval: str, evaluation_interval: str) -> str:
    """The shipped config with this team's targets, the rules, and remote write (JSON text)."""
    shipped = yaml.safe_load(SHIPPED_CONFIG.read_text())
    (job,) = [sc for sc in shipped["scrape_configs"] if sc["job_name"] == JOB]
    job = {**job, "static_configs": [
        {"targets": [m.address], "labels": {"user": m.spec.user, "team": m.spec.team}}
        for m in members
    ]}
    config = {
        "global": {**shipped["global"], "scrape_interval": scrape_interval,
                   "evaluation_interval": evaluation_interval},
        "rule_files": [str(p) for p in rules],
        "scrape_configs": [job],
        "remote_write": [{
            "url": remote_write_url,
            # Send within a second (default: up to 5 s), so that tests wait less.
            "queue_config": {"batch_send_deadline": "1s", "max_backoff": "1s"},
        }],
    }
    return json.dumps(config, indent=2)


def start(base: Path, specs: Sequence[Spec], cleanup: Callable[[Callable[[], object]], None], *,
          gen: Callable[[int], GenOptions] = small_tree, scrape_interval: str = "1s",
          evaluation_interval: str = "1s", down_for: str | None = "2s",
          prom_args: Sequence[str] = ()) -> TeamStack:
    """Generate the trees, start VictoriaMetrics, the exporters (in parallel), then Prometheus.

    ``cleanup`` receives every stop function as soon as there is something to stop.
    """
    require_binary("prometheus")
    vm = VMServer(base / "victoria-metrics")
    cleanup(vm.stop)
    vm.start()
    roots = make_trees(base / "homes", specs, gen)

    def member(i: int) -> Member:
        state = base / "state" / f"{i:02d}"
        truth = json.loads((roots[i] / "truth.json").read_text())
        started = Member(specs[i], roots[i], state, truth, start_daemon(specs[i], roots[i], state))
        cleanup(started.stop)
        return started

    with ThreadPoolExecutor(max_workers=8) as pool:  # start-up is mostly imports: overlap it
        members = list(pool.map(member, range(len(specs))))
    cleanup(lambda: terminate(members))  # runs first: the exporters then stop in parallel
    rules = rule_files(base, down_for)
    config = prometheus_config(members, rules, vm.remote_write_url,
                               scrape_interval=scrape_interval,
                               evaluation_interval=evaluation_interval)
    prom = PromServer(config, base / "prometheus", extra_args=prom_args)
    cleanup(prom.stop)
    prom.start(ready_timeout=60)
    return TeamStack(base, members, prom, vm, rules)


def terminate(members: Sequence[Member]) -> None:
    """Send SIGTERM to every running exporter without waiting (``Serve.stop`` waits)."""
    for m in members:
        if m.daemon.proc.poll() is None:
            m.daemon.proc.terminate()


def settled(member: Member) -> dict[str, Any] | None:
    """The exporter's families once its ledger holds every request it should."""
    fams = member.daemon.scrape()
    rows = total(fams, "claude_code_exporter_ledger_requests")
    return fams if rows >= member.expected_requests else None


def wait_settled(stack: TeamStack, timeout: float = 60) -> None:
    """Wait until every exporter has read its whole tree."""
    for m in stack.members:
        poll(partial(settled, m), timeout, f"{m.spec.user} ({m.address}) read its tree")


@contextlib.contextmanager
def running(base: Path, specs: Sequence[Spec], **options: Any) -> Iterator[TeamStack]:
    """A team stack for the length of a ``with`` block (benchmarks, manual runs)."""
    stops: list[Callable[[], object]] = []
    try:
        yield start(base, specs, stops.append, **options)
    finally:
        for stop in reversed(stops):
            with contextlib.suppress(Exception):
                stop()
