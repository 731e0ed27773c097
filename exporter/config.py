"""Configuration: one pydantic-settings model, validated once at start.

Precedence, highest first: command-line flags, environment variables
(``CLAUDE_CODE_EXPORTER_<NAME>``), the TOML file given with ``--config``,
built-in defaults. Every invalid setting is reported at once, each naming the
setting, its flag and its environment variable.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

ENV_PREFIX = "CLAUDE_CODE_EXPORTER_"
DEFAULT_PORT = 9477
CLAUDE_TELEMETRY_PORT = 9464  # Claude Code's own OpenTelemetry Prometheus port: never ours


def default_state_dir(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_STATE_HOME/claude-code-exporter`` (default ``~/.local/state/…``)."""
    base = env.get("XDG_STATE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".local" / "state"
    return root / "claude-code-exporter"


class Settings(BaseSettings):
    """Every setting of the exporter. Field docs double as ``--help`` text."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    data_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="transcript roots or projects/ dirs (replace the defaults); env: comma list",
    )
    state_dir: Path = Field(
        default_factory=default_state_dir, description="where the ledger lives"
    )
    listen: str = Field(f"127.0.0.1:{DEFAULT_PORT}", description="HOST:PORT for /metrics")
    namespace: str = Field("claude_code", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    project_label: Literal["basename", "full", "hash", "none"] = "basename"
    upload_bytes_per_token: float = Field(4.0, gt=0)
    kv_bytes_per_token: dict[str, Annotated[int, Field(gt=0)]] = Field(
        default_factory=lambda: {"mla": 70_272, "gqa": 516_096}
    )
    budget_day_usd: float | None = Field(None, ge=0)
    budget_month_usd: float | None = Field(None, ge=0)
    pricing: dict[str, Any] = Field(
        default_factory=dict, description="overrides of the price table"
    )
    workers: int | None = Field(None, ge=1, le=64)
    batch_mb: float = Field(32.0, gt=0, description="commit to the ledger every N MB read")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    poll: bool = False
    rescan_seconds: float = Field(30.0, gt=0)
    settle_seconds: float = Field(30.0, ge=0, description="quiet time before histograms")
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    basic_auth_user: str | None = None
    basic_auth_password: str | None = None

    @field_validator("data_dirs", mode="before")
    @classmethod
    def _split_dirs(cls, value: Any) -> Any:
        """Accept a comma list from the environment, as CLAUDE_CONFIG_DIR does."""
        if isinstance(value, str):
            return [Path(p.strip()).expanduser() for p in value.split(",") if p.strip()]
        return value

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        """HOST:PORT with a valid port that is not Claude Code's telemetry port."""
        host, port = split_listen(value)
        if port == CLAUDE_TELEMETRY_PORT:
            raise ValueError(f"port {port} belongs to Claude Code's own telemetry; pick another")
        if host not in ("localhost", "") and not _is_ip(host):
            raise ValueError(f"host {host!r} is not an IP address or localhost")
        return value

    @property
    def ledger_path(self) -> Path:
        """The ledger file inside the state directory."""
        return self.state_dir / "ledger.sqlite3"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init), then environment, then the TOML file if one was given."""
        toml = settings_cls.model_config.get("toml_file")
        sources = [init_settings, env_settings]
        if toml:
            sources.append(TomlConfigSettingsSource(settings_cls))
        return tuple(sources)


def split_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) → (host, port); ValueError if malformed."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"{value!r} is not HOST:PORT")
    port = int(port_text)
    if not 0 <= port < 65536:
        raise ValueError(f"port {port} is out of range")
    return host.strip("[]"), port


def _is_ip(host: str) -> bool:
    """True if ``host`` is a literal IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class ConfigError(Exception):
    """Invalid configuration: the message names every bad setting."""


def load_settings(flags: Mapping[str, Any], config_file: Path | None = None) -> Settings:
    """Build the settings from flags, environment and an optional TOML file."""
    cls: type[Settings] = Settings
    if config_file is not None:
        _check_toml(config_file)
        cls = type(
            "FileSettings",
            (Settings,),
            {"model_config": SettingsConfigDict(
                **{**Settings.model_config, "toml_file": config_file}
            )},
        )
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        return cls(**given)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _check_toml(path: Path) -> None:
    """Fail clearly on a config file that is missing or is not TOML."""
    try:
        with path.open("rb") as fh:
            tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _describe(exc: ValidationError) -> str:
    """One line per bad setting, naming its flag and environment variable."""
    lines = ["invalid configuration:"]
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else "?"
        where = ".".join(str(part) for part in err["loc"])
        flag = "--" + name.replace("_", "-")
        lines.append(f"  {where} ({flag} / {ENV_PREFIX}{name.upper()}): {err['msg']}")
    return "\n".join(lines)
