"""The systemd units, checked offline by systemd's own tools, and the exporter under MDWE.

No running systemd exists where the tests run: ``systemd-analyze verify`` runs
on each unit installed the way docs/deploy.md installs it (a system unit in a
scratch ``--root`` holding the host's own unit library, a user unit in a
scratch ``$HOME``), with the offline security review of the system unit,
``systemd-sysusers --root`` for its account, and the exporter itself under the
kernel's MemoryDenyWriteExecute that both units request.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.cli.config import ENV_PREFIX
from exporter.cli.exits import EXIT_CONFIG
from exporter.ingest import spool
from tests.support.deploy import (
    SYSTEM_UNIT,
    SYSUSERS,
    UNIT,
    USER_DROPIN,
    USER_UNIT,
    environment,
    run,
    service_settings,
    shown,
    tool,
)
from tests.support.net import free_port, http_get
from tests.support.process import Process
from tests.support.wait import poll

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


def fake_executable(path: Path) -> None:
    """Create an executable placeholder (a unit's ExecStart must exist to verify)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)


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
    cli_state = Path(spool.default_state_dir({})).relative_to(Path.home())
    assert env[f"{ENV_PREFIX}STATE_DIR"] == f"%h/{cli_state}"
    # Writable: the ledger's directory, and the price table's cache (the user cache dir).
    cache = "%h/.cache/claude-code-exporter"
    assert dropin["ReadWritePaths"] == [f"%h/{cli_state}", cache]
    assert dropin["ExecStartPre"] == [f"+mkdir -p %h/{cli_state} {cache}"]
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
             f"from exporter.cli.commands import main; "
             f"sys.exit(main(['serve', '--demo', '--listen', '127.0.0.1:{port}']))")
    wrapper = (f"import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); "
               f"assert libc.prctl({PR_SET_NO_NEW_PRIVS}, 1, 0, 0, 0) == 0; "
               f"assert libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) == 0; "
               f"os.execv(sys.executable, [sys.executable, '-c', {inner!r}])")
    proc = Process([sys.executable, "-c", wrapper], tmp_path / "serve.log")
    try:
        poll(lambda: proc.answers(f"http://127.0.0.1:{port}/healthz"), 60, "/healthz under MDWE")
        status, body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and b"claude_code_requests_total" in body
        assert proc.stop() == 0, proc.log()
    finally:
        proc.kill9()
