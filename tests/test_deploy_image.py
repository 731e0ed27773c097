"""The image, without docker: its wheel in a fresh venv, run as the image runs it.

The wheel is built from exactly what the Dockerfile copies (after
.dockerignore), installed with its dependencies into a fresh virtual
environment, then run with the image's ENV, ENTRYPOINT, CMD and HEALTHCHECK,
its paths moved into a scratch directory and its listen address on loopback.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from base64 import b64encode
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter import __version__
from exporter.cli.config import ENV_PREFIX
from tests.support.deploy import (
    dockerfile_env,
    exec_form,
    final,
    healthcheck_argv,
    in_build_context,
    run,
    shown,
    stages,
)
from tests.support.exposition import total
from tests.support.net import free_port, http_get
from tests.support.paths import ROOT
from tests.support.process import Process
from tests.support.tls import self_signed
from tests.support.wait import poll


def build_stage_sources(dest: Path) -> Path:
    """Lay out what the build stage's COPY lines put in its WORKDIR; return that directory."""
    workdir = "/"
    for ins in stages()[0]:
        if ins.keyword == "WORKDIR":
            workdir = ins.args
        if ins.keyword != "COPY":
            continue
        words = shlex.split(ins.args)
        assert not any(w.startswith("--") for w in words), ins
        *sources, target = words
        into = dest / Path(workdir).relative_to("/") / target
        for source in sources:
            src = ROOT / source
            files = ([src] if src.is_file() else
                     sorted(p for p in src.rglob("*") if p.is_file()))
            for file in files:
                rel = file.relative_to(ROOT).as_posix()
                if not in_build_context(rel):
                    continue
                if src.is_dir():  # docker copies a directory's contents
                    out = into / file.relative_to(src)
                elif target.endswith("/") or len(sources) > 1:
                    out = into / file.name
                else:
                    out = into
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, out)
    return dest / Path(workdir).relative_to("/")


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment with the built wheel installed, as in the image."""

    root: Path
    wheel: Path
    seconds: float

    @property
    def bin(self) -> Path:
        """Its bin directory."""
        return self.root / "bin"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    """Build the wheel from the Dockerfile's build inputs and install it into a fresh venv."""
    base = tmp_path_factory.mktemp("image")
    started = time.monotonic()
    src = build_stage_sources(base / "fs")
    wheels = base / "wheels"
    proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                "--wheel-dir", str(wheels), str(src)], timeout=300)
    assert proc.returncode == 0, shown(proc)
    (wheel,) = wheels.glob("*.whl")
    root = base / "venv"
    proc = run([sys.executable, "-m", "venv", str(root)])
    assert proc.returncode == 0, shown(proc)
    # Without PYTHONPATH: a checkout on it (with its egg-info) would read as "already installed".
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = run([str(root / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                "--no-input", str(wheel)], env=clean, timeout=600)
    assert proc.returncode == 0, shown(proc)
    yield Venv(root, wheel, time.monotonic() - started)
    shutil.rmtree(base, ignore_errors=True)


def test_wheel_carries_the_package_data_and_the_command(venv: Venv) -> None:
    """The wheel holds exporter/data/pricing.toml and the console script, and no tests."""
    with zipfile.ZipFile(venv.wheel) as whl:
        names = whl.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = whl.read(entry_points).decode()
        pricing = whl.read("exporter/data/pricing.toml")
    assert pricing == (ROOT / "exporter/data/pricing.toml").read_bytes()
    script = r"^claude-code-exporter\s*=\s*exporter\.cli\.entry:main$"
    assert re.search(script, scripts, re.M), scripts
    assert not [n for n in names if n.startswith("tests/")]


def test_venv_command_runs_from_the_installed_wheel(venv: Venv, tmp_path: Path) -> None:
    """--help and --version work, and the package is imported from the venv, not the repo."""
    env = {"PATH": f"{venv.bin}:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = run(["claude-code-exporter", "--help"], env=env, cwd=tmp_path)
    assert proc.returncode == 0 and all(c in proc.stdout for c in ("serve", "report")), shown(proc)
    proc = run(["claude-code-exporter", "--version"], env=env, cwd=tmp_path)
    assert proc.stdout.strip() == __version__, shown(proc)
    proc = run(["python", "-c", "import exporter, pathlib; print(pathlib.Path(exporter.__file__)"
                ".resolve())"], env=env, cwd=tmp_path)
    assert Path(proc.stdout.strip()).is_relative_to(venv.root.resolve()), shown(proc)


def test_every_module_imports_with_the_declared_dependencies(venv: Venv, tmp_path: Path) -> None:
    """Each module of the installed package imports in the venv, which has only declared deps."""
    script = ("import importlib, pkgutil, exporter\n"
              "bad = []\n"
              "for mod in pkgutil.walk_packages(exporter.__path__, 'exporter.'):\n"
              "    try:\n"
              "        importlib.import_module(mod.name)\n"
              "    except ImportError as exc:\n"
              "        bad.append(f'{mod.name}: {exc}')\n"
              "print('\\n'.join(bad))\n")
    proc = run([str(venv.bin / "python"), "-c", script], cwd=tmp_path,
               env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0 and not proc.stdout.strip(), (
        "modules that need a package missing from [project.dependencies]:\n" + shown(proc))


def test_venv_serves_the_demo_and_stops_on_sigterm(venv: Venv, tmp_path: Path) -> None:
    """`serve --demo` from the venv: /healthz 200, /metrics and / answer, SIGTERM exits 0."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Process([str(venv.bin / "claude-code-exporter"), "serve", "--demo", "--listen",
                    f"127.0.0.1:{port}"], tmp_path / "serve.log", cwd=tmp_path,
                   env={"PATH": f"{venv.bin}:/usr/bin:/bin", "HOME": str(tmp_path)})
    try:
        poll(lambda: proc.answers(url + "/healthz"), 60, "demo /healthz")
        status, body = http_get(url + "/metrics")
        assert status == 200 and total(body.decode(), "claude_code_requests") > 0
        assert b"claude_code_exporter_build_info" in body
        assert http_get(url + "/")[0] == 200
        assert proc.stop() == 0, proc.log()
    finally:
        proc.kill9()


@dataclass
class Container:
    """The image's process, run from the venv with the image's ENV, ENTRYPOINT and CMD."""

    proc: Process
    env: dict[str, str]
    url: str
    state: Path

    def healthcheck(self) -> subprocess.CompletedProcess[str]:
        """Run the image's HEALTHCHECK command in the container's environment."""
        return run(healthcheck_argv(), env=self.env, timeout=30)


def container_env(venv: Venv, base: Path, port: int) -> tuple[dict[str, str], Path, Path]:
    """The runtime stage's ENV with its paths moved under ``base`` and loopback listening."""
    image = dockerfile_env()
    data, state = base / "claude", base / "state"
    moved = {image[f"{ENV_PREFIX}DATA_DIRS"]: str(data),
             image[f"{ENV_PREFIX}STATE_DIR"]: str(state)}
    env = {name: moved.get(value, value) for name, value in image.items()}
    # PATH: the image's venv first (so `python` is the venv's), then the system.
    venv_bin, rest = image["PATH"].split(":", 1)
    assert venv_bin.endswith("/bin") and rest == "$PATH", image["PATH"]
    env["PATH"] = f"{venv.bin}:/usr/bin:/bin"
    env["HOME"] = str(base / "home")
    env[f"{ENV_PREFIX}LISTEN"] = f"127.0.0.1:{port}"  # loopback only in tests
    return env, data, state


@pytest.fixture
def container(venv: Venv, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Container]:
    """Start the image's command; indirect parametrization adds "auth" and/or "tls"."""
    port = free_port()
    env, data, state = container_env(venv, tmp_path, port)
    extras = getattr(request, "param", ())
    if "auth" in extras:
        env.update({f"{ENV_PREFIX}BASIC_AUTH_USER": "prom",
                    f"{ENV_PREFIX}BASIC_AUTH_PASSWORD": "s3cret"})
    if "tls" in extras:
        cert, key = self_signed(tmp_path)
        env.update({f"{ENV_PREFIX}TLS_CERT_FILE": str(cert),
                    f"{ENV_PREFIX}TLS_KEY_FILE": str(key)})
    proc = run([str(venv.bin / "claude-code-exporter"), "generate", str(data), "--seed", "7",
                "--sessions", "3"], env=env)
    assert proc.returncode == 0, shown(proc)
    state.mkdir()
    argv = exec_form(final("ENTRYPOINT").args) + exec_form(final("CMD").args)
    proc_ = Process(argv, tmp_path / "container.log", env=env, cwd=tmp_path)
    scheme = "https" if "tls" in extras else "http"
    try:
        yield Container(proc_, env, f"{scheme}://127.0.0.1:{port}", state)
    finally:
        proc_.kill9()


def test_image_command_serves_the_mounted_transcripts(container: Container) -> None:
    """With the image's ENV the exporter reads the data dir, keeps state, and SIGTERM exits 0."""
    poll(lambda: container.proc.answers(container.url + "/healthz"), 60, "/healthz")
    truth = json.loads(Path(container.env[f"{ENV_PREFIX}DATA_DIRS"], "truth.json").read_text())
    status, body = http_get(container.url + "/metrics")
    assert status == 200
    assert total(body.decode(), "claude_code_requests") == truth["totals"]["requests"]
    logged = container.proc.log().splitlines()
    assert any(json.loads(line).get("event") == "serving" for line in logged), logged
    assert (container.state / "ledger.sqlite3").is_file()
    assert container.proc.stop() == 0, container.proc.log()


def test_image_healthcheck_passes_when_healthy_and_fails_when_down(container: Container) -> None:
    """The HEALTHCHECK command exits 0 against the running exporter and non-zero once it stops."""
    poll(lambda: container.proc.answers(container.url + "/healthz"), 60, "/healthz")
    proc = container.healthcheck()
    assert proc.returncode == 0, shown(proc)
    assert container.proc.stop() == 0
    proc = container.healthcheck()
    assert proc.returncode != 0, shown(proc)


@pytest.mark.parametrize("container", [("auth",), ("auth", "tls")], indirect=True,
                         ids=["basic-auth", "basic-auth+tls"])
def test_image_healthcheck_follows_basic_auth_and_tls(container: Container) -> None:
    """With basic auth (and TLS) on, the HEALTHCHECK passes, and fails with a wrong password."""
    auth = {"Authorization": "Basic " + b64encode(b"prom:s3cret").decode()}
    poll(lambda: container.proc.answers(container.url + "/healthz", auth), 60, "/healthz with auth")
    assert http_get(container.url + "/healthz")[0] == 401
    proc = container.healthcheck()
    assert proc.returncode == 0, shown(proc)
    wrong = {**container.env, f"{ENV_PREFIX}BASIC_AUTH_PASSWORD": "wrong"}
    proc = run(healthcheck_argv(), env=wrong, timeout=30)
    assert proc.returncode != 0, shown(proc)
