"""Configuration: one pydantic-settings model, validated once at start.

Precedence, highest first: command-line flags, environment variables
(``CLAUDE_CODE_EXPORTER_<NAME>``), the TOML file given with ``--config``,
built-in defaults. The environment is an argument of :func:`load_settings`
(the command line passes ``os.environ``; tests pass a dict): nothing here reads
the process's own. Every invalid setting is reported at once, each naming the
setting, its flag and its environment variable.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from exporter.errors import ConfigError
from exporter.ingest.spool import default_state_dir
from exporter.ledger.schema import LEDGER_FILE

ENV_PREFIX = "CLAUDE_CODE_EXPORTER_"
DEFAULT_PORT = 9477
CLAUDE_TELEMETRY_PORT = 9464  # Claude Code's own OpenTelemetry Prometheus port: never ours


def _state_dir_without_env() -> Path:
    """The state dir's default when no environment is given (load_settings gives one)."""
    return Path(default_state_dir({}))


class Settings(BaseSettings):
    """Every setting of the exporter. Field docs double as ``--help`` text."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    data_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="transcript roots or projects/ dirs (replace the defaults); env: comma list",
    )
    codex_homes: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="OpenAI Codex CLI homes read beside Claude Code's transcripts (default: "
                    "$CODEX_HOME, else ~/.codex; with --data-dir, only Codex homes given "
                    "there); env: comma list",
    )
    state_dir: Path = Field(
        default_factory=_state_dir_without_env, description="where the ledger lives"
    )
    spool_dir: Path | None = Field(
        None, description="where the status line's samples arrive and today's cost for it is "
                          "written, when not the state dir: the user's own state dir for a "
                          "system service or a container (docs/plan-limits.md)",
    )
    listen: str = Field(f"127.0.0.1:{DEFAULT_PORT}", description="HOST:PORT for /metrics")
    listen_beyond_loopback: bool = Field(
        False, description="a listen address beyond loopback is intended (the container image, "
                           "inside its own network namespace): no warning for it at start",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="further Host names the HTTP endpoint answers to (a reverse proxy's name; "
                    ".example.com for a domain and its subdomains; * for any), beside loopback "
                    "names and, on a bind beyond loopback, IP literals, single-label names and "
                    "this machine's name (docs/deploy.md); env: comma list",
    )
    namespace: str = Field("claude_code", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    project_label: Literal["basename", "full", "hash", "none"] = "basename"
    # What a project is (exporter.projections.project_groups): the folder Claude Code files
    # a session's transcript in (git worktrees of one repository share it), or each cwd.
    project_grouping: Literal["folder", "cwd"] = "folder"
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
    batch_mb: float = Field(128.0, gt=0, description="commit to the ledger every N MB read")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    poll: bool = False
    update_prices: bool = Field(False, description="fetch the newest genai-prices data at start")
    rescan_seconds: float = Field(30.0, gt=0)
    settle_seconds: float = Field(30.0, ge=0, description="quiet time before histograms")
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    basic_auth_user: str | None = None
    basic_auth_password: str | None = None
    # ---- limits (docs/reliability.md) ----
    max_line_bytes: int = Field(
        64 * 1024 * 1024, ge=1024,
        description="longest transcript line read; longer ones are skipped (rejected: too_long)",
    )
    http_max_connections: int = Field(
        64, ge=2, le=4096, description="HTTP connections served at once (one thread each)"
    )
    http_timeout_seconds: float = Field(
        10.0, gt=0, description="whole-request deadline: TLS handshake, request and response"
    )
    http_max_header_bytes: int = Field(
        16 * 1024, ge=1024, le=1024 * 1024,
        description="request line plus headers; more is refused with 431",
    )
    # ---- end limits ----
    # ---- OTLP push (docs/teams.md) ----
    otlp_endpoint: str | None = Field(
        None, description="OTLP/HTTP metrics URL, e.g. http://collector:4318/v1/metrics"
    )
    prometheus_enabled: bool = Field(True, description="serve /metrics (false: OTLP only)")
    otlp_interval_seconds: float = Field(60.0, ge=0.1, description="seconds between pushes")
    otlp_timeout_seconds: float = Field(10.0, gt=0, description="timeout of one push")
    otlp_headers: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="HTTP headers (auth); env: comma list of NAME=VALUE"
    )
    otlp_certificate_file: Path | None = Field(None, description="CA bundle for https")
    otlp_host: Literal["name", "hash", "none"] = Field(
        "name", description="resource host.name, or host.id = a hash of it, or nothing"
    )
    otlp_user: Literal["name", "hash", "none"] = Field(
        "hash", description="resource user.name, or user.hash = a hash of it, or nothing"
    )
    otlp_resource_attributes: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="extra resource attributes (team, ...); env: a=b,c=d"
    )
    compat: Annotated[list[Literal["native", "genai"]], NoDecode] = Field(
        default_factory=list,
        description="also emit Claude Code's own metric names (native) and/or the OpenTelemetry "
                    "GenAI histogram (genai), see docs/compat.md; env: comma list",
    )

    @field_validator("data_dirs", "codex_homes", mode="before")
    @classmethod
    def _split_dirs(cls, value: Any) -> Any:
        """Accept a comma list from the environment, as CLAUDE_CONFIG_DIR does."""
        if isinstance(value, str):
            return [Path(p.strip()).expanduser() for p in value.split(",") if p.strip()]
        return value

    @field_validator("compat", mode="before")
    @classmethod
    def _split_compat(cls, value: Any) -> Any:
        """Accept a comma list from the environment; a repeated mode counts once."""
        if isinstance(value, str):
            value = [p.strip() for p in value.split(",") if p.strip()]
        if isinstance(value, list | tuple):
            return list(dict.fromkeys(value))
        return value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        """Accept a comma list from the environment."""
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, value: list[str]) -> list[str]:
        """Each entry a host name, an IP address, ``.domain`` or ``*`` (no port, no scheme)."""
        from exporter.serve.hosts import normalise_entry  # serve's rule

        bad = [entry for entry in value if normalise_entry(entry) is None]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))}: expected host names or addresses "
                             "without port or scheme, .domain, or *")
        return value

    @field_validator("basic_auth_user")
    @classmethod
    def _check_user(cls, value: str | None) -> str | None:
        """A user name with ``:`` could never log in: basic auth splits at the first colon."""
        if value is not None and ":" in value:
            raise ValueError("a user name cannot contain ':' (basic auth splits the "
                             "credentials at the first colon, so it could never log in)")
        return value

    @field_validator("otlp_headers", "otlp_resource_attributes", mode="before")
    @classmethod
    def _split_pairs(cls, value: Any) -> Any:
        """Accept ``a=b,c=d`` from the environment, as OTEL_EXPORTER_OTLP_HEADERS does."""
        if isinstance(value, str):
            pairs = [p.partition("=") for p in value.split(",") if p.strip()]
            if any(not sep or not k.strip() for k, sep, _ in pairs):
                raise ValueError("expected a comma list of NAME=VALUE")
            return {k.strip(): v.strip() for k, _, v in pairs}
        return value

    @field_validator("otlp_endpoint")
    @classmethod
    def _check_otlp_endpoint(cls, value: str | None) -> str | None:
        """An http(s) URL with a host; a bare base URL gets the ``/v1/metrics`` path."""
        if value is None:
            return None
        url = urlsplit(value.strip())
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        if url.path in ("", "/"):
            url = url._replace(path="/v1/metrics")
        return urlunsplit(url)

    @field_validator("prometheus_enabled")
    @classmethod
    def _something_exports(cls, value: bool, info: ValidationInfo) -> bool:
        """The Prometheus endpoint may be off only when OTLP pushes the metrics."""
        if not value and not info.data.get("otlp_endpoint"):
            raise ValueError("false needs otlp_endpoint: nothing would export the metrics")
        return value
    # ---- end OTLP push ----

    @field_validator("pricing")
    @classmethod
    def _check_pricing(cls, value: dict[str, Any]) -> dict[str, Any]:
        """The price overrides must make a valid table: checked with every other setting."""
        if value:
            from exporter.projections.pricing import RateTable  # only if given

            RateTable.load(value)  # its ValueError names the bad key
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

    @model_validator(mode="after")
    def _halves_together(self) -> Settings:
        """TLS needs both files, basic auth both halves: half a setting is an error."""
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if bool(self.basic_auth_user) != bool(self.basic_auth_password):
            raise ValueError(
                "basic_auth_user and basic_auth_password go together (the password from "
                "the config file or CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD)"
            )
        return self

    @property
    def samples_dir(self) -> Path:
        """Where the status line's samples are read from: ``spool_dir``, else the state dir."""
        return self.spool_dir or self.state_dir

    @property
    def ledger_path(self) -> Path:
        """The ledger file inside the state directory."""
        return self.state_dir / LEDGER_FILE

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The values given to the constructor only: :func:`load_settings` merges the sources."""
        return (init_settings,)


def shown_default(name: str) -> str:
    """A setting's default as ``--help`` shows it."""
    value = Settings.model_fields[name].get_default(call_default_factory=True)
    return "none" if value is None else str(value)


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


def load_settings(flags: Mapping[str, Any], environ: Mapping[str, str],
                  config_file: Path | None = None) -> Settings:
    """Build the settings from flags, the environment ``environ`` and an optional TOML file.

    Every problem is reported at once, in one ConfigError: unknown keys of the
    file (with the nearest valid key), and each invalid value named where it
    was given (flag, environment variable or file).
    """
    table: dict[str, Any] = {}
    problems: list[str] = []
    if config_file is not None:
        table = _read_toml(config_file)
        fields = Settings.model_fields
        problems += [_unknown_key(config_file, key) for key in table if key not in fields]
        table = {k: v for k, v in table.items() if k in fields}
    given = _Given({k: v for k, v in flags.items() if v is not None}, table, config_file,
                   dict(environ))
    # Lowest first, as pydantic-settings merges its own sources: defaults that depend
    # on the environment, the file, the CLAUDE_CODE_EXPORTER_* variables, the flags.
    values = _merged({"state_dir": Path(default_state_dir(environ))}, table,
                     _Environment(Settings, environ)(), given.flags)
    settings = None
    try:
        settings = Settings(**values)
    except ValidationError as exc:
        problems += _describe(exc, given)
    if problems or settings is None:
        raise ConfigError("\n".join(["invalid configuration:", *problems]))
    return settings


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping, not ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ  # read by _load_env_vars, which the base __init__ calls
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._environ, self.case_sensitive, self.env_ignore_empty,
                              self.env_parse_none_str)


def _merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """The layers merged, later ones winning; tables (dicts) merge key by key."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = _merged(out[key], value)
            else:
                out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class _Given:
    """Where settings came from: flags, the config file's table, the environment."""

    flags: Mapping[str, Any]
    table: Mapping[str, Any]
    config_file: Path | None
    env: Mapping[str, str]


def _read_toml(path: Path) -> dict[str, Any]:
    """The config file's table; a missing file or invalid TOML is a ConfigError at once."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _unknown_key(path: Path, key: str) -> str:
    """A line for a key of the file that is no setting, with the nearest setting."""
    near = difflib.get_close_matches(key.replace("-", "_"), list(Settings.model_fields), n=1,
                                     cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"  {path}: unknown key {key!r}{hint}"


_PREFIX = re.compile(r"^(?:Value error|Assertion failed), ")


def _describe(exc: ValidationError, given: _Given) -> list[str]:
    """One line per bad setting, named as the user gave it (flag, variable or file key)."""
    lines = []
    for err in exc.errors():
        message = _PREFIX.sub("", err["msg"])
        if not err["loc"]:  # a rule across settings: its message names them
            lines.append(f"  {message}")
            continue
        name = str(err["loc"][0])
        where = ".".join(str(part) for part in err["loc"])
        lines.append(f"  {_origin(name, where, given)}: {message}")
    return lines


def _origin(name: str, where: str, given: _Given) -> str:
    """Where a setting's value came from, as the user would look for it."""
    variable = f"{ENV_PREFIX}{name.upper()}"
    flag = {"data_dirs": "--data-dir", "codex_homes": "--codex-home"}.get(
        name, "--" + name.replace("_", "-"))
    if name in given.flags:
        return f"{where} ({flag})"
    if variable in given.env:
        return f"{where} ({variable})"
    if name in given.table and given.config_file is not None:
        return f"{where} (in {given.config_file})"
    return f"{where} ({flag} / {variable})"
