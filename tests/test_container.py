"""The image built from the Dockerfile and run with podman, the way docs/deploy.md runs it.

The build and run commands are read from docs/deploy.md's podman blocks, with
only what a test must change: its own container name, volume and port, the
generated transcripts in place of ``~/.claude``, and for this machine the
local stand-in base (``--pull=never``, tests/support/container_base.py) and the
host's CA bundle for pip. ``--read-only-tmpfs=false`` gives podman's
``--read-only`` Docker's meaning (no writable /tmp).

Checked, in this order on one volume: the build warns of nothing and keeps
the HEALTHCHECK; the venv has no pip, setuptools or wheel; the container serves
exactly the transcripts' truth on the published loopback port; the image's
HEALTHCHECK passes, fails while the exporter is stopped (SIGSTOP) and passes
again; ``podman stop`` exits 0 with exit status 0 and leaves a ledger owned by
the image's user; after ``podman rm``, a new container on the same volume
keeps every counter though half of the transcripts are gone.

Deselect with ``-m "not container"`` where podman is missing; under CI
(``CI`` set) a missing tool is a failure, since .ci/install installs them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import __version__
from tests.support.container_base import (
    Podman,
    StandIn,
    build_argv,
    ensure_stand_in,
    from_images,
    qualified,
    shown,
)
from tests.support.deploy import tool
from tests.support.exposition import total
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.prometheus import in_ci
from tests.support.wait import PollTimeoutError, poll

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

DOCKERFILE = ROOT / "Dockerfile"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
#: The tag of the build stage, kept so that pruning old builds spares its cache.
BUILD_STAGE_TAG = "localhost/claude-code-exporter:build-stage"
TOKEN_TYPES = {"input": "input_tokens", "output": "output_tokens",
               "cache_read": "cache_read_tokens", "cache_write_5m": "cache_write_5m_tokens",
               "cache_write_1h": "cache_write_1h_tokens"}
#: A healthy start logs no warnings: the image listens beyond loopback inside its
#: own network namespace and says so (LISTEN_BEYOND_LOOPBACK); the host side is
#: published on 127.0.0.1 only.
EXPECTED_WARNINGS: set[str] = set()


# -------------------------------------------------------------- the commands


def documented(program: str, sub: str) -> list[str]:
    """The first ``PROGRAM SUB ...`` command of docs/deploy.md's sh blocks, as words."""
    for block in re.findall(r"```sh\n(.*?)```", DEPLOY_DOC.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith(f"{program} {sub} "):
                return shlex.split(line, comments=True)
    raise AssertionError(f"no `{program} {sub}` command in {DEPLOY_DOC}")


def image_name() -> str:
    """The image the documented build tags (and the documented run starts)."""
    words = documented("podman", "build")
    return words[words.index("-t") + 1]


def run_argv(image: str, *, name: str, tree: Path, volume: str, port: int) -> list[str]:
    """The documented ``podman run`` of ``image`` with this test's name, data, volume, port."""
    words = documented("podman", "run")[2:]
    replace = {"~/.claude:/claude:ro": f"{tree}:/claude:ro",
               "claude-code-exporter-state:/state": f"{volume}:/state",
               "127.0.0.1:9477:9477": f"127.0.0.1:{port}:9477"}
    used = [word for word in words if word in replace]
    assert sorted(used) == sorted(replace), f"docs/deploy.md's podman run changed: {words}"
    words = [replace.get(word, word) for word in words]
    words[words.index("--name") + 1] = name
    assert words[-1] == image, words
    return ["run", "--read-only-tmpfs=false", *words]


# -------------------------------------------------------------- the fixtures


@pytest.fixture(scope="module")
def podman() -> Podman:
    """Podman on the tests' own storage, configured for this machine."""
    if os.geteuid() != 0:
        if in_ci():
            pytest.fail("CI runs the tests as root; this run is not", pytrace=False)
        pytest.skip("podman and mmdebstrap run as root here (rootless is not set up)")
    engine = Podman(tool("podman"))
    engine.configure()
    return engine


@dataclass(frozen=True)
class Image:
    """The built image and how it was made."""

    name: str
    base: StandIn
    build_log: str
    build_seconds: float
    size: int  # bytes, base included
    base_size: int


def image_size(podman: Podman, name: str) -> int:
    """The size of a local image in bytes, as ``podman images`` shows it."""
    return int(podman.check("image", "inspect", "--format", "{{.Size}}", name))


@pytest.fixture(scope="module")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory,
          request: pytest.FixtureRequest) -> Image:
    """Build the image from the work tree as docs/deploy.md does, on the local stand-in base."""
    bases = {qualified(name) for name in from_images(DOCKERFILE)}
    assert len(bases) == 1, bases
    base = ensure_stand_in(podman, bases.pop(), tool("mmdebstrap"),
                           tmp_path_factory.mktemp("stand-in"))
    # Earlier runs' images that nothing tags any more (their build stages too).
    podman.check("image", "prune", "--force")
    documented_build = documented("podman", "build")[2:]
    assert documented_build[-1] == ".", documented_build
    started = time.monotonic()
    proc = podman.run(*build_argv(documented_build[:-1], ROOT, ca_bundle=CA_BUNDLE),
                      timeout=600)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, shown(proc)
    stage = [BUILD_STAGE_TAG if word == image_name() else word for word in documented_build[:-1]]
    podman.check(*build_argv([*stage, "--target", "build"], ROOT, ca_bundle=CA_BUNDLE),
                 timeout=600)
    built = Image(image_name(), base, proc.stdout + proc.stderr, seconds,
                  image_size(podman, image_name()), image_size(podman, base.name))
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None and capture is not None:  # docs/deploy.md's figures, in the CI log
        with capture.global_and_fixture_disabled():
            reporter.write_line(
                f"\ncontainer: stand-in base {'made' if base.made else 'reused'} in "
                f"{base.seconds:.0f} s, image built in {seconds:.0f} s; "
                f"{built.size / 1e6:.0f} MB = base {built.base_size / 1e6:.0f} MB + "
                f"{(built.size - built.base_size) / 1e6:.1f} MB")
    return built


@dataclass(frozen=True)
class Tree:
    """Generated transcripts and their ground truth."""

    path: Path
    truth: dict[str, Any]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    """A small generated transcript tree, readable by any uid as docs/deploy.md requires."""
    path = tmp_path_factory.mktemp("transcripts") / "claude"
    proc = subprocess.run([sys.executable, "-m", "exporter", "generate", str(path),
                           "--seed", "7", "--sessions", "3"],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, shown(proc)
    world_readable(path)
    return Tree(path, json.loads((path / "truth.json").read_text()))


def world_readable(path: Path) -> None:
    """Make a tree readable (and its directories searchable) by every uid."""
    for item in [path, *path.rglob("*")]:
        item.chmod(item.stat().st_mode | (0o555 if item.is_dir() else 0o444))


@dataclass(frozen=True)
class Container:
    """A container started by the documented command."""

    podman: Podman
    name: str
    url: str

    def inspect(self) -> dict[str, Any]:
        """``podman inspect`` of the container."""
        doc: list[dict[str, Any]] = json.loads(self.podman.check("inspect", self.name))
        return doc[0]

    def healthcheck(self) -> subprocess.CompletedProcess[str]:
        """``podman healthcheck run``: the image's own HEALTHCHECK, once."""
        return self.podman.run("healthcheck", "run", self.name, timeout=60)

    def scrape(self) -> dict[str, Any]:
        """Families by name from one scrape of /metrics through the published port."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return {f.name: f for f in text_string_to_metric_families(text)}

    def events(self) -> list[dict[str, Any]]:
        """The exporter's JSON log lines; anything else must be podman's own messages."""
        proc = self.podman.run("logs", self.name)
        assert proc.returncode == 0, shown(proc)
        events = []
        for line in (proc.stdout + proc.stderr).splitlines():
            if line.startswith("{"):
                events.append(json.loads(line))
            else:  # podman's own notes, such as its lack of systemd for health timers
                assert line.startswith("time="), f"not a log event: {line!r}\n{shown(proc)}"
        return events

    def remove(self) -> None:
        """Remove the container, running or not."""
        self.podman.run("rm", "--force", "--time", "5", self.name, timeout=60)


def start(podman: Podman, image: Image, name: str, tree: Path, volume: str) -> Container:
    """Start the documented ``podman run`` and wait for /healthz 200."""
    port = free_port()
    proc = podman.run(*run_argv(image.name, name=name, tree=tree, volume=volume, port=port),
                      timeout=120)
    assert proc.returncode == 0, shown(proc)
    box = Container(podman, name, f"http://127.0.0.1:{port}")

    def healthy() -> bool:
        state = box.inspect()["State"]
        assert state["Status"] == "running", (state, box.podman.run("logs", name).stderr)
        return http_status(box.url + "/healthz") == 200

    poll(healthy, 60, f"{name} /healthz")
    return box


def http_status(url: str) -> int:
    """The status of a GET (errors included)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def settled(box: Container, requests: int) -> bool:
    """True once /metrics counts ``requests`` requests."""
    return total(box.scrape(), "claude_code_requests") == requests


@pytest.fixture(scope="module")
def volume(podman: Podman) -> Iterator[str]:
    """The name of the state volume the containers share; removed at the end."""
    name = f"claude-code-exporter-test-state-{os.getpid()}"
    yield name
    podman.run("volume", "rm", "--force", name, timeout=60)


@pytest.fixture(scope="module")
def first(podman: Podman, image: Image, tree: Tree, volume: str) -> Iterator[Container]:
    """The first container over the tree, on a fresh volume, once it counts every request."""
    box = start(podman, image, f"claude-code-exporter-test-{os.getpid()}", tree.path, volume)
    try:
        try:
            poll(lambda: settled(box, tree.truth["totals"]["requests"]), 60, "every request")
        except PollTimeoutError as exc:  # say why: what it counts, and its own log
            raise AssertionError(f"{total(box.scrape(), 'claude_code_requests')} requests of "
                                 f"{tree.truth['totals']['requests']}; its log:\n"
                                 f"{podman.run('logs', box.name).stderr[-3000:]}") from exc
        yield box
    finally:
        box.remove()


@dataclass(frozen=True)
class Stopped:
    """What ``podman stop`` did to the first container."""

    box: Container
    proc: subprocess.CompletedProcess[str]
    state: dict[str, Any]


@pytest.fixture(scope="module")
def stopped(first: Container) -> Stopped:
    """The first container after ``podman stop``."""
    proc = first.podman.run("stop", first.name, timeout=60)
    return Stopped(first, proc, first.inspect()["State"])


# ------------------------------------------------------------------ the tests


def dockerfile_healthcheck() -> tuple[dict[str, str], list[str]]:
    """The Dockerfile's HEALTHCHECK: its options and its exec-form command."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("HEALTHCHECK ")]
    options, _, command = line.removeprefix("HEALTHCHECK ").partition("CMD ")
    flags = dict(word.removeprefix("--").split("=", 1) for word in options.split())
    argv = json.loads(command)
    assert isinstance(argv, list), command
    return flags, [str(word) for word in argv]


def seconds(duration: str) -> float:
    """A Dockerfile duration (``30s``, ``5m``) in seconds."""
    value, unit = float(duration[:-1]), duration[-1]
    return value * {"s": 1, "m": 60, "h": 3600}[unit]


def test_build_warns_of_nothing_and_the_image_keeps_the_healthcheck(
    podman: Podman, image: Image,
) -> None:
    """The documented podman build is clean, and the image has the Dockerfile's HEALTHCHECK."""
    warnings = [line for line in image.build_log.splitlines() if re.search(r"warn", line, re.I)]
    assert not warnings, image.build_log
    health = json.loads(podman.check("image", "inspect", "--format", "{{json .HealthCheck}}",
                                     image.name))
    flags, argv = dockerfile_healthcheck()
    assert health["Test"] == ["CMD", *argv]
    assert health["Interval"] == seconds(flags["interval"]) * 1e9
    assert health["StartPeriod"] == seconds(flags["start-period"]) * 1e9
    assert health["Retries"] == int(flags["retries"])
    config = json.loads(podman.check("image", "inspect", "--format", "{{json .Config}}",
                                     image.name))
    assert config["Entrypoint"] == ["claude-code-exporter"] and config["Cmd"] == ["serve"]
    assert config["StopSignal"] == "SIGTERM" and "/state" in config["Volumes"]


def test_runtime_venv_holds_the_exporter_and_no_packaging_tools(
    podman: Podman, image: Image,
) -> None:
    """The image's venv has this version of the package and no pip, setuptools or wheel."""
    script = ("import importlib.metadata as m, json, sys; print(json.dumps("
              "{'prefix': sys.prefix, 'dists': sorted(d.metadata['Name'].lower() "
              "for d in m.distributions())}))")
    out = json.loads(podman.check("run", "--rm", "--entrypoint", "python", image.name,
                                  "-c", script))
    assert out["prefix"] == "/opt/claude-code-exporter", out
    assert "claude-code-exporter" in out["dists"], out
    assert not {"pip", "setuptools", "wheel"} & set(out["dists"]), out["dists"]
    version = podman.check("run", "--rm", image.name, "--version").strip()
    assert version == __version__


def test_serves_the_mounted_transcripts_exactly_on_loopback(first: Container, tree: Tree) -> None:
    """/healthz is 200 and /metrics equals the truth: requests, tokens by type, cost to the cent."""
    assert http_status(first.url + "/healthz") == 200
    fams, truth = first.scrape(), tree.truth["totals"]
    assert total(fams, "claude_code_requests") == truth["requests"]
    for label, key in TOKEN_TYPES.items():
        assert total(fams, "claude_code_tokens", type=label) == truth[key], label
    assert total(fams, "claude_code_cost_usd") == pytest.approx(truth["cost_usd"], abs=0.005)
    assert total(fams, "claude_code_unpriced_tokens") == truth["unpriced_tokens"]
    ports = first.inspect()["NetworkSettings"]["Ports"]["9477/tcp"]
    assert [p["HostIp"] for p in ports] == ["127.0.0.1"], ports
    events = first.events()
    serving = [e for e in events if e.get("event") == "serving"]
    assert serving and serving[0]["listen"] == "0.0.0.0:9477", events
    noisy = {e["event"] for e in events if e.get("level") in ("warning", "error", "critical")}
    assert noisy <= EXPECTED_WARNINGS, events


def test_image_healthcheck_passes_fails_while_the_exporter_is_stopped_and_recovers(
    first: Container,
) -> None:
    """``podman healthcheck run``: healthy; unhealthy while PID 1 is SIGSTOPped; healthy again."""
    proc = first.healthcheck()
    assert proc.returncode == 0, shown(proc)
    pid = int(first.inspect()["State"]["Pid"])
    assert b"claude-code-exporter" in Path(f"/proc/{pid}/cmdline").read_bytes()
    os.kill(pid, signal.SIGSTOP)
    try:
        proc = first.healthcheck()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert proc.returncode == 1 and "unhealthy" in proc.stdout, shown(proc)
    poll(lambda: first.healthcheck().returncode == 0, 60, "healthy after SIGCONT")


def test_stop_exits_zero_and_leaves_the_ledger_to_the_image_user(
    podman: Podman, image: Image, stopped: Stopped, volume: str,
) -> None:
    """``podman stop`` and the exporter exit 0; the volume's files belong to the image's user."""
    assert stopped.proc.returncode == 0, shown(stopped.proc)
    assert stopped.state["Status"] == "exited" and stopped.state["ExitCode"] == 0, stopped.state
    assert "stopped" in {e.get("event") for e in stopped.box.events()}
    proc = stopped.box.healthcheck()
    assert proc.returncode != 0, shown(proc)
    user = podman.check("image", "inspect", "--format", "{{.Config.User}}", image.name).strip()
    uid, _, gid = user.partition(":")
    mountpoint = Path(podman.check("volume", "inspect", "--format", "{{.Mountpoint}}",
                                   volume).strip())
    files = sorted(mountpoint.iterdir())
    assert mountpoint / "ledger.sqlite3" in files, files
    for path in files:
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (int(uid), int(gid)), (path, st)


def test_a_new_container_on_the_volume_keeps_the_counters(
    image: Image, tree: Tree, volume: str, stopped: Stopped, tmp_path: Path,
) -> None:
    """After ``podman rm``, a new container with half the transcripts gone counts them all."""
    podman = stopped.box.podman
    stopped.box.remove()
    assert podman.run("container", "exists", stopped.box.name).returncode == 1
    fewer = tmp_path / "claude"
    shutil.copytree(tree.path, fewer)
    transcripts = sorted(fewer.rglob("*.jsonl"))
    for path in transcripts[::2]:
        path.unlink()
    world_readable(fewer)
    box = start(podman, image, f"claude-code-exporter-test-{os.getpid()}-2", fewer, volume)
    try:
        truth = tree.truth["totals"]
        fams = box.scrape()  # /healthz 200: the first pass over what is left is done
        assert total(fams, "claude_code_requests") == truth["requests"]
        for label, key in TOKEN_TYPES.items():
            assert total(fams, "claude_code_tokens", type=label) == truth[key], label
        assert total(fams, "claude_code_cost_usd") == pytest.approx(truth["cost_usd"], abs=0.005)
        proc = podman.run("stop", box.name, timeout=60)
        assert proc.returncode == 0 and box.inspect()["State"]["ExitCode"] == 0, shown(proc)
    finally:
        box.remove()


def test_docker_commands_are_the_podman_ones() -> None:
    """docs/deploy.md's docker build and run are its podman ones but for ``--format docker``."""
    podman_build = documented("podman", "build")[1:]
    at = podman_build.index("--format")
    assert podman_build[at + 1] == "docker", podman_build
    del podman_build[at:at + 2]
    assert documented("docker", "build")[1:] == podman_build
    assert documented("docker", "run")[1:] == documented("podman", "run")[1:]
