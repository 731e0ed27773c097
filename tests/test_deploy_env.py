"""The example env file and every variable the deploy files set are real settings."""

from __future__ import annotations

import re

import pytest

from exporter.cli.config import ENV_PREFIX, Settings, load_settings
from exporter.errors import ConfigError
from tests.support.deploy import (
    ENV_EXAMPLE,
    SYSTEM_UNIT,
    USER_UNIT,
    compose,
    dockerfile_env,
    environment,
    service_settings,
)

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


def test_env_example_sets_only_real_settings_with_valid_values() -> None:
    """Every variable in exporter.env.example is a setting, and all of them together load."""
    variables = env_example_variables()
    assert f"{ENV_PREFIX}DATA_DIRS" in variables and f"{ENV_PREFIX}LISTEN" in variables
    for name, value in variables.items():
        assert setting_name(name) in Settings.model_fields, name
        # One format for systemd's EnvironmentFile= and docker's --env-file: no quoting.
        assert re.fullmatch(r"[^\s\"'\\]*", value), f"{name}: quote-free value needed: {value!r}"
    try:
        settings = load_settings({}, variables)
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
