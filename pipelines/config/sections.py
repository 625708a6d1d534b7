"""The sections of the configuration, one pydantic model per concern (``[broker]``, ``[store]``, ...).

Each checks its own keys; :class:`~pipelines.config.settings.Settings` puts them together and reads
them from ``config.toml`` and the environment.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipelines.config.masking import mask_url
from pipelines.config.urls import check_amqp_url, check_redis_url, check_url, split_urls
from pipelines.wire.naming import is_valid_actor_name


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
    step_lease_s: float = Field(default=20.0, ge=1)
    idempotency_retention_s: int = Field(default=7 * 86400, ge=1)
    stalled_run_after_s: float = Field(default=1320.0, gt=0)
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
        re-drives it (``stalled_run_after_s``)."""
        return self.stalled_run_after_s


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
    local_steps: bool = True


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
