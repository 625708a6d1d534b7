"""Configuration: ``config.toml`` validated by one pydantic model per concern.

Every key can be overridden by an environment variable ``PIPELINES_<SECTION>__<KEY>`` (for example
``PIPELINES_BROKER__URL``); top-level keys by ``PIPELINES_<KEY>``. Nothing is read at import: call
:func:`load_settings` (the CLI and ``actors`` do).
"""

from __future__ import annotations

import base64
import binascii
import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from pipelines.config_errors import ENV_PREFIX, explain, unparsable_variables
from pipelines.config_urls import check_amqp_url, check_redis_url, check_url, split_urls
from pipelines.errors import ConfigError
from pipelines.masking import mask_secrets, mask_url
from pipelines.naming import is_valid_actor_name, is_valid_namespace

#: Environment variable naming the config file; the default is ``./config.toml``.
CONFIG_PATH_ENV = "PIPELINES_CONFIG"
DEFAULT_CONFIG_PATH = Path("config.toml")


_read_environment: ContextVar[bool] = ContextVar("read_environment", default=True)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AppConfig(_Section):
    """What the CLI and workers import."""

    actors: str = "actors"
    #: ``module:attribute`` naming a mapping of name to pipeline; None when the actors register theirs.
    pipelines: str | None = None


class TlsConfig(_Section):
    """TLS for ``amqps://`` beyond the system's certificate authorities."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_hostname: str | None = None


class BrokerConfig(_Section):
    """RabbitMQ: connection, queue arguments and limits."""

    url: str = "amqp://guest:guest@127.0.0.1:5672/%2F"
    """One node's URL, or the nodes of a cluster separated by commas (or use ``urls``)."""
    urls: tuple[str, ...] = ()
    """The nodes of a cluster, one URL each; set this or ``url``, not both."""
    queue_type: Literal["quorum", "classic"] = "quorum"
    quorum_initial_group_size: int | None = Field(default=None, ge=1, le=99)
    """Replicas of each quorum queue (x-quorum-initial-group-size); None leaves RabbitMQ's default."""
    confirm_delivery: bool = True
    heartbeat_s: int = Field(default=30, ge=0, le=600)
    connection_attempts: int = Field(default=3, ge=1, le=100)
    retry_delay_s: float = Field(default=1.0, ge=0, le=60)
    blocked_connection_timeout_s: float = Field(default=60.0, gt=0)
    prefetch: int = Field(default=0, ge=0, le=65535)
    max_message_bytes: int = Field(default=1_048_576, gt=0, le=134_217_728)
    delivery_limit: int = Field(default=20, ge=1)
    delay_tiers_s: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 1800.0, 7200.0, 21600.0)
    consumer_timeout_s: int = Field(default=1800, ge=1)
    max_queue_length: int = Field(default=0, ge=0)
    warn_message_bytes: int = Field(default=65_536, gt=0)
    large_message_policy: Literal["warn", "error"] = "warn"
    tls: TlsConfig = TlsConfig()

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, url: str) -> str:
        nodes = split_urls(url)
        if len(nodes) > 1 and any(node.startswith("memory://") for node in nodes):
            raise ValueError("memory:// names the in-process broker: it cannot be one of several URLs")
        for node in nodes:
            check_amqp_url(node)
        return url

    @field_validator("urls")
    @classmethod
    def _urls_scheme(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for node in urls:
            if check_amqp_url(node).startswith("memory://") or "," in node:
                raise ValueError("expected one amqp:// or amqps:// URL per entry of urls")
        return urls

    @model_validator(mode="after")
    def _url_or_urls(self) -> BrokerConfig:
        if self.urls and "url" in self.model_fields_set:
            raise ValueError("set either broker.url or broker.urls, not both (urls lists every node of a cluster)")
        return self

    @field_validator("delay_tiers_s")
    @classmethod
    def _tiers_ascending(cls, tiers: tuple[float, ...]) -> tuple[float, ...]:
        if not tiers or list(tiers) != sorted(set(tiers)) or tiers[0] < 0.01:
            raise ValueError("expected a non-empty list of distinct delays in seconds, ascending, each >= 0.01")
        return tiers

    @property
    def is_memory(self) -> bool:
        return self.url.startswith("memory://") and not self.urls

    @property
    def node_urls(self) -> tuple[str, ...]:
        """Every node's URL, in the order configured."""
        return self.urls or split_urls(self.url)

    @property
    def masked_url(self) -> str:
        """The node URLs with their passwords hidden, for logs and errors."""
        return ", ".join(mask_url(node) for node in self.node_urls)


class StoreConfig(_Section):
    """The run store: runs, step states, chord barriers, idempotency records."""

    url: str = "redis://127.0.0.1:6379/0"
    retention_s: int = Field(default=7 * 86400, ge=60)
    max_result_bytes: int = Field(default=1_048_576, gt=0)
    step_lease_s: float = Field(default=660.0, gt=0)
    idempotency_retention_s: int = Field(default=7 * 86400, ge=1)
    stalled_run_after_s: float | None = Field(default=None, gt=0)
    stalled_run_redrives: int = Field(default=3, ge=0)
    wait_for_replicas: int = Field(default=0, ge=0, le=16)
    replica_wait_ms: int = Field(default=100, ge=1, le=60_000)

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, url: str) -> str:
        return check_redis_url(url)

    @model_validator(mode="after")
    def _replicas_to_wait_for(self) -> StoreConfig:
        if self.wait_for_replicas and self.is_memory:
            raise ValueError(
                "the embedded store (memory://) has no replicas to wait for: leave store.wait_for_replicas at 0"
            )
        return self

    @property
    def is_memory(self) -> bool:
        return self.url.startswith("memory://")

    @property
    def stalled_after_s(self) -> float:
        """How long a run no step holds a live lease of, touched by nothing, waits before the stall sweep
        re-drives it: ``stalled_run_after_s``, else twice ``step_lease_s`` (a lease, and as long again for
        a copy put off or a retry waiting in the delay queues to come back)."""
        return self.stalled_run_after_s or 2 * self.step_lease_s


class RetriesConfig(_Section):
    """Default retry policy of every actor (an actor's own options win)."""

    max_retries: int = Field(default=5, ge=0)
    min_backoff_s: float = Field(default=1.0, gt=0)
    max_backoff_s: float = Field(default=300.0, gt=0)
    permanent_errors: tuple[str, ...] = ("pydantic.ValidationError", "pipelines.errors.DefinitionError")

    @field_validator("permanent_errors")
    @classmethod
    def _importable(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            module, _, attribute = name.rpartition(".")
            if not module or not attribute.isidentifier():
                raise ValueError(
                    f"expected dotted names of exception classes, such as 'pydantic.ValidationError', not {name!r}"
                )
        return names


class WorkerConfig(_Section):
    """Defaults for work done by actors."""

    time_limit_s: float = Field(default=600.0, gt=0)


class ProfilesConfig(_Section):
    """Defaults of the actor profiles (``profile=`` on an actor; see ``pipelines.profiles``)."""

    fire_and_forget_max_retries: int = Field(default=3, ge=0)
    ordered_partitions: int = Field(default=8, ge=1, le=1024)
    ordered_max_backoff_s: float = Field(default=30.0, gt=0)
    long_running_queue: str = "long_running"
    long_running_lease_s: float = Field(default=60.0, ge=1)
    scheduled_grace_s: float = Field(default=90.0, gt=0)

    @field_validator("long_running_queue")
    @classmethod
    def _queue_word(cls, queue: str) -> str:
        if not is_valid_actor_name(queue):
            raise ValueError("expected a Dramatiq queue name of letters, digits, '_' or '-', such as 'long_running'")
        return queue


class EncryptionConfig(_Section):
    """Keys of payload encryption (Fernet: AES-128-CBC with HMAC-SHA256): the first encrypts, all decrypt."""

    keys: tuple[str, ...] = ()

    @field_validator("keys")
    @classmethod
    def _fernet_keys(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        for key in keys:
            try:
                raw = base64.urlsafe_b64decode(key.encode())
            except (ValueError, binascii.Error):
                raw = b""
            if len(raw) != 32:
                raise ValueError(
                    "expected Fernet keys (32 bytes, url-safe base64), newest first; make one with "
                    "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`"
                )
        return keys


class LoggingConfig(_Section):
    """Log lines of worker processes: every line carries correlation id, run id, message id, actor, attempt."""

    format: Literal["json", "text"] = "json"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class TelemetryConfig(_Section):
    """OpenTelemetry tracing, exported over OTLP."""

    enabled: bool = False
    endpoint: str = "http://127.0.0.1:4318"
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    service_name: str = "rabbit-pipelines"
    sample_ratio: float = Field(default=0.1, ge=0, le=1)
    keep_failed: bool = True
    keep_slower_than_s: float = Field(default=5.0, ge=0)
    resource_attributes: dict[str, str] = Field(default_factory=dict)

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, endpoint: str) -> str:
        return check_url(endpoint, ("http", "https"))


class MetricsConfig(_Section):
    """Prometheus metrics of worker processes, exposed on one port (prometheus-client multiprocess mode)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=9191, ge=1, le=65535)
    multiprocess: bool = True
    multiprocess_dir: Path | None = None
    queue_sample_interval_s: float = Field(default=15.0, gt=0)
    heartbeat_interval_s: float = Field(default=10.0, gt=0)


#: The shortest console token taken: one a person would pick can be guessed.
MIN_TOKEN_CHARS = 16


class UiConfig(_Section):
    """The web console (``pipelines ui``): where it listens, the token its actions need, links out."""

    host: str = "127.0.0.1"
    port: int = Field(default=8181, ge=1, le=65535)
    token: str = ""
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    jaeger_url: str = ""
    metrics_urls: tuple[str, ...] = ()
    refresh_s: float = Field(default=2.0, ge=0.5, le=300)

    @field_validator("jaeger_url")
    @classmethod
    def _jaeger_url(cls, url: str) -> str:
        return check_url(url, ("http", "https")) if url else url

    @field_validator("token")
    @classmethod
    def _long_token(cls, token: str) -> str:
        if token and len(token) < MIN_TOKEN_CHARS:
            raise ValueError(f"expected at least {MIN_TOKEN_CHARS} characters, such as `openssl rand -hex 16` prints")
        return token


class Settings(BaseSettings):
    """The whole configuration, one section per concern."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True)

    namespace: str = "pipelines"
    app: AppConfig = AppConfig()
    broker: BrokerConfig = BrokerConfig()
    store: StoreConfig = StoreConfig()
    retries: RetriesConfig = RetriesConfig()
    worker: WorkerConfig = WorkerConfig()
    profiles: ProfilesConfig = ProfilesConfig()
    encryption: EncryptionConfig = EncryptionConfig()
    logging: LoggingConfig = LoggingConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    metrics: MetricsConfig = MetricsConfig()
    ui: UiConfig = UiConfig()

    @field_validator("namespace")
    @classmethod
    def _namespace_word(cls, namespace: str) -> str:
        if not is_valid_namespace(namespace):
            raise ValueError("expected a lower-case word of letters, digits, '_' or '-' (at most 63), such as 'prod'")
        return namespace

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file's values come in as init arguments; the environment overrides them, except when a
        # configuration already read is being changed on purpose (`with_overrides`).
        if not _read_environment.get():
            return (init_settings,)
        return (env_settings, init_settings)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Settings:
        """Validate ``values`` as a configuration, ignoring the environment (tests, embedded apps).

        Raises:
            ConfigError: As for :func:`load_settings`.
        """
        return _validated(dict(values), source="values", use_env=False)

    def masked(self) -> dict[str, Any]:
        """The effective configuration with every credential in URLs, every key and the console token as ``***``."""
        masked: dict[str, Any] = mask_secrets(self.model_dump(mode="json"))
        masked["encryption"]["keys"] = ["***"] * len(self.encryption.keys)
        masked["ui"]["token"] = "***" if self.ui.token else ""
        return masked

    def with_overrides(self, **sections: Mapping[str, Any]) -> Settings:
        """A copy with some section keys replaced, validated like the file."""
        data = self.model_dump()
        for section, values in sections.items():
            if isinstance(data.get(section), dict):
                data[section] = {**data[section], **values}
            else:
                data[section] = values
        return _validated(data, source="overrides", use_env=False)


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Read and validate the configuration.

    Args:
        path: The TOML file; defaults to ``$PIPELINES_CONFIG`` or ``./config.toml``. A missing
            default file means "all defaults"; a missing explicit file is an error.

    Raises:
        ConfigError: One message naming the key, the bad value and the expected form.
    """
    explicit = path is not None or CONFIG_PATH_ENV in os.environ
    file = Path(path if path is not None else os.environ.get(CONFIG_PATH_ENV, DEFAULT_CONFIG_PATH))
    data: dict[str, Any] = {}
    if file.exists():
        try:
            data = tomllib.loads(file.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file} is not valid TOML: {e}.") from None
    elif explicit:
        fix = (
            "Give the path of an existing file (--config)."
            if path is not None
            else f"Point {CONFIG_PATH_ENV} at an existing file, or unset it to use ./{DEFAULT_CONFIG_PATH}."
        )
        raise ConfigError(f"Config file {file} does not exist. {fix}")
    return _validated(data, source=str(file), use_env=True)


def _validated(data: dict[str, Any], *, source: str, use_env: bool) -> Settings:
    if use_env:
        _reject_unknown_sections()
    token = _read_environment.set(use_env)
    try:
        return Settings(**data)
    except ValidationError as e:
        raise ConfigError(explain(e, source)) from None
    except SettingsError:
        # pydantic-settings could not parse an environment value of a structured key (a list, say).
        names = ", ".join(unparsable_variables()) or f"a {ENV_PREFIX}* variable"
        raise ConfigError(
            f"Invalid configuration: {names} is not JSON; list and table values in the environment must be, "
            "such as PIPELINES_BROKER__DELAY_TIERS_S='[1, 5, 30]'."
        ) from None
    finally:
        _read_environment.reset(token)


def _reject_unknown_sections() -> None:
    """A ``PIPELINES_<SECTION>__<KEY>`` variable whose section does not exist is a typo, not a setting.

    pydantic-settings reads only the variables of known sections, so ``PIPELINES_BROKR__URL`` would
    otherwise be ignored and the worker would quietly connect where the file says.
    """
    sections = {name for name, field in Settings.model_fields.items() if isinstance(field.default, BaseModel)}
    for name in sorted(os.environ):
        section, nested, _ = name.removeprefix(ENV_PREFIX).partition("__")
        if name.startswith(ENV_PREFIX) and nested and section.lower() not in sections:
            raise ConfigError(
                f"Invalid configuration: {name} names no section {section.lower()!r}. "
                f"Sections are {', '.join(sorted(sections))}; check its spelling or unset it."
            )
