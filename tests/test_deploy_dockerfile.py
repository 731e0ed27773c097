"""The Dockerfile and its build context, without a Docker engine.

Hadolint lints it; its stages, user, signals and healthcheck are read from the
file; .dockerignore is evaluated on the work tree as docker would.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from exporter.cli.assemble import http_options
from exporter.cli.config import ENV_PREFIX, load_settings
from exporter.serve.hosts import is_loopback
from tests.support.deploy import (
    DOCKERFILE,
    base_images,
    dockerfile_env,
    exec_form,
    final,
    healthcheck_argv,
    in_build_context,
    run,
    shown,
    stages,
    tool,
)
from tests.support.paths import ROOT


def test_hadolint_passes_the_dockerfile_and_flags_an_unpinned_copy(tmp_path: Path) -> None:
    """Hadolint finds nothing in the Dockerfile but flags a copy whose base image is :latest."""
    hadolint = tool("hadolint")
    proc = run([hadolint, "--no-color", str(DOCKERFILE)])
    assert proc.returncode == 0 and not proc.stdout.strip(), shown(proc)
    worse = tmp_path / "Dockerfile"
    worse.write_text(DOCKERFILE.read_text().replace(base_images()[0], "python:latest"))
    proc = run([hadolint, "--no-color", str(worse)])
    assert proc.returncode != 0 and "DL3007" in proc.stdout, shown(proc)


def test_dockerfile_builds_in_stages_and_runs_unprivileged() -> None:
    """Pinned base, wheel built in a first stage, non-root user, healthcheck, SIGTERM, 9477."""
    images = base_images()
    assert len(images) >= 2 and len(set(images)) == 1, images
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", images[0]), images
    all_stages = stages()
    build = " ".join(i.args for i in all_stages[0] if i.keyword == "RUN")
    assert "pip wheel" in build and "venv" in build
    copies = [i.args for i in all_stages[-1] if i.keyword == "COPY"]
    assert copies and all(c.startswith("--from=") for c in copies), copies
    user = final("USER").args.split(":")[0]
    args = {i.args.partition("=")[0]: i.args.partition("=")[2]
            for i in all_stages[-1] if i.keyword == "ARG"}
    uid = args.get(user.strip("${}"), user)
    assert uid.isdigit() and int(uid) >= 1000, user
    assert final("STOPSIGNAL").args == "SIGTERM"
    env = dockerfile_env()
    listen_port = env[f"{ENV_PREFIX}LISTEN"].rpartition(":")[2]
    assert env[f"{ENV_PREFIX}LISTEN"].startswith("0.0.0.0:")
    assert final("EXPOSE").args == listen_port
    assert env[f"{ENV_PREFIX}STATE_DIR"] in json.loads(final("VOLUME").args)
    assert exec_form(final("ENTRYPOINT").args) == ["claude-code-exporter"]
    assert exec_form(final("CMD").args) == ["serve"]
    assert "/healthz" in " ".join(healthcheck_argv())


def test_the_image_s_public_bind_is_acknowledged_and_a_bare_one_warns() -> None:
    """The image's ENV loads, binds 0.0.0.0 and says it means to: no warning at start.

    The same address from a bare ``--listen`` (no acknowledgement) still warns.
    """
    env = {k: v for k, v in dockerfile_env().items() if k.startswith(ENV_PREFIX)}
    image = http_options(load_settings({}, env))
    assert image.host == "0.0.0.0" and not is_loopback(image.host)
    assert image.warnings() == []
    bare = http_options(load_settings({"listen": "0.0.0.0:9477"}, {}))
    assert [event for event, _ in bare.warnings()] == [
        "listening_beyond_loopback"]


def build_context_files() -> list[str]:
    """Every file of the work tree that docker would send as build context."""
    files = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
            if in_build_context(rel):
                files.append(rel)
    return sorted(files)


def test_dockerignore_sends_the_wheel_sources_and_nothing_private() -> None:
    """The build context holds the package sources and pricing data, no tests, caches or git."""
    context = build_context_files()
    assert {"pyproject.toml", "README.md", "exporter/cli/commands.py",
            "exporter/data/pricing.toml"} <= set(context)
    for rel in context:
        assert rel in ("pyproject.toml", "README.md") or rel.startswith("exporter/"), rel
        assert "__pycache__" not in rel and not rel.endswith(".pyc"), rel
    for private in (".git/HEAD", "tests/test_deploy_dockerfile.py", ".venv/bin/python",
                    "state/ledger.sqlite3", "claude_code_exporter.egg-info/PKG-INFO"):
        assert not in_build_context(private), private
