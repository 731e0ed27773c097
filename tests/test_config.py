"""Settings: precedence flags > env > TOML > defaults, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli.config import load_settings
from exporter.errors import ConfigError


def test_defaults_bind_loopback_on_our_own_port() -> None:
    """With nothing set the exporter listens on 127.0.0.1, never on 9464."""
    s = load_settings({}, {"XDG_STATE_HOME": "/tmp/xdg-state"})
    assert s.listen.startswith("127.0.0.1:") and not s.listen.endswith(":9464")
    assert s.ledger_path == Path("/tmp/xdg-state/claude-code-exporter/ledger.sqlite3")


def test_precedence_flags_env_file(tmp_path: Path) -> None:
    """A flag beats the environment, which beats the TOML file, which beats defaults."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('listen = "127.0.0.1:1111"\nnamespace = "from_file"\nworkers = 3\n'
                   '[kv_bytes_per_token]\nmine = 1000\n')
    env = {"CLAUDE_CODE_EXPORTER_NAMESPACE": "from_env", "CLAUDE_CODE_EXPORTER_WORKERS": "2"}
    s = load_settings({"workers": 1}, env, cfg)
    assert (s.listen, s.namespace, s.workers) == ("127.0.0.1:1111", "from_env", 1)
    assert s.kv_bytes_per_token == {"mine": 1000}


def test_data_dirs_from_env_comma_list() -> None:
    """CLAUDE_CODE_EXPORTER_DATA_DIRS takes a comma list, like CLAUDE_CONFIG_DIR."""
    env = {"CLAUDE_CODE_EXPORTER_DATA_DIRS": "/a, /b/projects"}
    assert load_settings({}, env).data_dirs == [Path("/a"), Path("/b/projects")]


def test_all_errors_at_once_each_naming_the_setting() -> None:
    """Several bad settings give one message naming each as it was given (flag or variable)."""
    with pytest.raises(ConfigError) as err:
        load_settings({"listen": "127.0.0.1:9464", "workers": 0, "log_level": "loud"}, {})
    assert str(err.value).splitlines() == [
        "invalid configuration:",
        "  listen (--listen): port 9464 belongs to Claude Code's own telemetry; pick another",
        "  workers (--workers): Input should be greater than or equal to 1",
        "  log_level (--log-level): Input should be 'debug', 'info', 'warning' or 'error'",
    ]


def test_an_environment_value_is_named_by_its_variable() -> None:
    """A bad value from the environment names the variable, not a flag."""
    with pytest.raises(ConfigError) as err:
        load_settings({}, {"CLAUDE_CODE_EXPORTER_WORKERS": "0"})
    assert str(err.value) == (
        "invalid configuration:\n"
        "  workers (CLAUDE_CODE_EXPORTER_WORKERS): Input should be greater than or equal to 1"
    )


def test_unknown_key_in_file_names_the_file_and_the_nearest_key(tmp_path: Path) -> None:
    """A typo in the TOML file is a key of that file, with the nearest valid key."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("lisen = '127.0.0.1:1'\nlog-level = 'debug'\nzzz = 1\n")
    with pytest.raises(ConfigError) as err:
        load_settings({}, {}, cfg)
    assert str(err.value) == (
        "invalid configuration:\n"
        f"  {cfg}: unknown key 'lisen'; did you mean 'listen'?\n"
        f"  {cfg}: unknown key 'log-level'; did you mean 'log_level'?\n"
        f"  {cfg}: unknown key 'zzz'"
    )
    assert "--lisen" not in str(err.value)


def test_every_problem_at_once_without_pydantic_prefixes(tmp_path: Path) -> None:
    """Typos, bad values from the file and a bad price override come in one message."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("lisen = 'x'\nworkers = 0\n[pricing.models.nope]\ninput = 1\n")
    with pytest.raises(ConfigError) as err:
        load_settings({"listen": "nohost"}, {}, cfg)
    text = str(err.value)
    assert f"{cfg}: unknown key 'lisen'" in text
    assert f"workers (in {cfg}): Input should be greater than or equal to 1" in text
    assert "listen (--listen): 'nohost' is not HOST:PORT" in text
    assert f"pricing (in {cfg}): invalid pricing table at 'models.nope." in text
    assert "Value error" not in text and "Assertion failed" not in text


def test_a_rule_across_settings_has_no_prefix() -> None:
    """A cross-setting rule's message stands alone, without pydantic's "Value error,"."""
    with pytest.raises(ConfigError) as err:
        load_settings({"basic_auth_user": "prom"}, {})
    assert str(err.value).splitlines()[1].startswith("  basic_auth_user and basic_auth_password")


def test_missing_or_broken_config_file(tmp_path: Path) -> None:
    """A missing file and a non-TOML file each give a clear error naming the file."""
    with pytest.raises(ConfigError, match=r"nope\.toml"):
        load_settings({}, {}, tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("= = =")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings({}, {}, bad)


@pytest.mark.parametrize("listen", ["nohost", "1.2.3.4:70000", "host name:80"])
def test_bad_listen_values(listen: str) -> None:
    """Malformed listen addresses are refused."""
    with pytest.raises(ConfigError, match="listen"):
        load_settings({"listen": listen}, {})


def test_ipv6_listen_is_accepted() -> None:
    """[::1]:PORT is a valid loopback listen address."""
    assert load_settings({"listen": "[::1]:9999"}, {}).listen == "[::1]:9999"


def test_half_a_pair_is_an_error(tmp_path: Path) -> None:
    """A user without a password, or a certificate without a key, is refused."""
    with pytest.raises(ConfigError, match="basic_auth_password"):
        load_settings({"basic_auth_user": "prom"}, {})
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="tls_key_file"):
        load_settings({"tls_cert_file": cert}, {})


def test_the_environment_is_the_one_given_not_the_process_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Variables of the process are not read: only the mapping passed in counts."""
    monkeypatch.setenv("CLAUDE_CODE_EXPORTER_NAMESPACE", "from_process")
    monkeypatch.setenv("XDG_STATE_HOME", "/tmp/from-process")
    s = load_settings({}, {"XDG_STATE_HOME": "/tmp/given"})
    assert s.namespace == "claude_code"
    assert s.state_dir == Path("/tmp/given/claude-code-exporter")
    env = {"CLAUDE_CODE_EXPORTER_STATE_DIR": "/srv/state", "XDG_STATE_HOME": "/tmp/given"}
    assert load_settings({}, env).state_dir == Path("/srv/state")


def test_the_beyond_loopback_acknowledgement_is_a_checked_boolean() -> None:
    """listen_beyond_loopback parses true/false from the environment; other words name it."""
    env = {"CLAUDE_CODE_EXPORTER_LISTEN_BEYOND_LOOPBACK": "true"}
    assert load_settings({"listen": "0.0.0.0:9477"}, env).listen_beyond_loopback is True
    assert load_settings({}, {}).listen_beyond_loopback is False
    with pytest.raises(ConfigError, match="CLAUDE_CODE_EXPORTER_LISTEN_BEYOND_LOOPBACK"):
        load_settings({}, {"CLAUDE_CODE_EXPORTER_LISTEN_BEYOND_LOOPBACK": "sure"})
