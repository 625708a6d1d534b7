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
from pipelines.config.urls import (
    check_amqp_url,
    check_schema_name,
    check_store_url,
    check_url,
    is_postgres_url,
    split_urls,
)
from pipelines.wire.naming import is_valid_actor_name


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AppConfig(_Section):
    """What the CLI and workers import."""

    actors: str = "actors"
    """The module that declares the actors. The CLI imports it; `dramatiq MODULE` starts its worker."""
    pipelines: str | None = None
    """A mapping of name to pipeline, as `module:attribute`. Unset when the actors module registers its own."""


class TlsConfig(_Section):
    """TLS for ``amqps://`` beyond the system's certificate authorities."""

    ca_file: Path | None = None
    """Certificate authorities to verify the broker by, beside the system's."""
    cert_file: Path | None = None
    """A client certificate for `amqps://`."""
    key_file: Path | None = None
    """The client certificate's private key."""
    server_hostname: str | None = None
    """The host name the broker's certificate must name, when it differs from the URL's."""


class BrokerConfig(_Section):
    """RabbitMQ: connection, queue arguments and limits."""

    url: str = "amqp://guest:guest@127.0.0.1:5672/%2F"
    """One node's URL, or the nodes of a cluster separated by commas (or use ``urls``)."""
    urls: tuple[str, ...] = ()
    """The nodes of a cluster, one URL each; set this or ``url``, not both."""
    queue_type: Literal["quorum", "classic"] = "quorum"
    """Every queue's type: `quorum` (replicated, with a delivery limit) or `classic`."""
    quorum_initial_group_size: int | None = Field(default=None, ge=1, le=99)
    """Replicas of each quorum queue (x-quorum-initial-group-size); None leaves RabbitMQ's default."""
    confirm_delivery: bool = True
    """Wait for RabbitMQ to confirm every publish, one wait per batch."""
    heartbeat_s: int = Field(default=30, ge=0, le=600)
    """The AMQP heartbeat interval. RabbitMQ gives a silent worker's deliveries back after two or three
    missed intervals: with 30, a lost or frozen machine's steps run again after about 90 s. 0 turns
    heartbeats off (not advised)."""
    connection_attempts: int = Field(default=3, ge=1, le=100)
    """Connection attempts before a connection error is reported."""
    retry_delay_s: float = Field(default=1.0, ge=0, le=60)
    """The pause between connection attempts."""
    blocked_connection_timeout_s: float = Field(default=60.0, gt=0)
    """How long a publish may stay blocked by a RabbitMQ resource alarm before it fails."""
    prefetch: int = Field(default=0, ge=0, le=65535)
    """Unacknowledged messages a worker holds per actor queue. 0 uses Dramatiq's default (2 per thread)."""
    max_message_bytes: int = Field(default=1_048_576, gt=0, le=134_217_728)
    """The largest message body accepted for publishing (`MessageTooLarge` above)."""
    delivery_limit: int = Field(default=20, ge=1)
    """Quorum queues: deliveries of one message, crashes included, before it is dead-lettered."""
    delay_tiers_s: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 1800.0, 7200.0, 21600.0)
    """The delay queues, ascending. A delayed message waits in the longest tier not past its due time."""
    consumer_timeout_s: int = Field(default=1800, ge=1)
    """The RabbitMQ server's `consumer_timeout`. No actor's time limit may exceed it."""
    max_queue_length: int = Field(default=0, ge=0)
    """The default cap of every actor queue (an actor's `max_length` wins). 0: unbounded."""
    warn_message_bytes: int = Field(default=65_536, gt=0)
    """A larger message logs a warning once per actor, or is refused with `large_message_policy = "error"`."""
    large_message_policy: Literal["warn", "error"] = "warn"
    """What a message over `warn_message_bytes` meets: `warn` or `error`."""
    tls: TlsConfig = TlsConfig()
    """TLS settings for `amqps://` URLs."""

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
    """The run store: `redis://`, `rediss://`, `redis+cluster://`, `redis+sentinel://`, `postgresql://`, `memory://`."""
    postgres_schema: str = "pipelines"
    """Where a `postgresql://` store keeps its tables (made at first use, or by `pipelines store migrate`)."""
    postgres_pooled: bool = False
    """`store.url` goes through a pooler in transaction mode (PgBouncer): no prepared statements on it."""
    postgres_listen_url: str = ""
    """A direct URL to the PostgreSQL primary where waits and relays listen (`LISTEN`); needed when pooled."""
    retention_s: int = Field(default=7 * 86400, ge=60)
    """How long runs, steps, chord barriers and keys are kept after their last change."""
    max_result_bytes: int = Field(default=1_048_576, gt=0)
    """The largest step result stored with a run (`ResultTooLarge` above). Return ids, not data."""
    step_lease_s: float = Field(default=20.0, ge=1)
    """The lease a worker holds a started step or claimed key by, renewed each quarter of it."""
    idempotency_retention_s: int = Field(default=7 * 86400, ge=1)
    """How long a completed idempotency key is remembered."""
    stalled_run_after_s: float = Field(default=1320.0, gt=0)
    """A run that nothing touched for this long, with no live lease, is stalled and re-driven."""
    stalled_run_redrives: int = Field(default=3, ge=0)
    """Re-drives of a stalled run before it fails with the reason."""
    wait_for_replicas: int = Field(default=0, ge=0, le=16)
    """Replicas each important write waits for (Redis `WAIT`). 0: no wait."""
    replica_wait_ms: int = Field(default=100, ge=1, le=60_000)
    """How long such a write waits for its replicas, in milliseconds."""
    step_log_records: int = Field(default=200, ge=0, le=10_000)
    """The most log records a step keeps (its newest, over its attempts). 0: steps' logs are not kept."""
    step_log_bytes: int = Field(default=65_536, ge=4096, le=1_048_576)
    """The most bytes of log records a step keeps (its newest, over its attempts)."""

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, url: str) -> str:
        return check_store_url(url)

    @field_validator("postgres_schema")
    @classmethod
    def _schema_name(cls, schema: str) -> str:
        return check_schema_name(schema)

    @model_validator(mode="after")
    def _replicas_to_wait_for(self) -> StoreConfig:
        if self.wait_for_replicas and self.is_memory:
            raise ValueError(
                "the embedded store (memory://) has no replicas to wait for: leave store.wait_for_replicas at 0"
            )
        if self.postgres_pooled and not self.postgres_listen_url:
            raise ValueError(
                "a pooled PostgreSQL store (store.postgres_pooled) listens for notifications on a session of its "
                "own, which a pooler in transaction mode does not keep: set store.postgres_listen_url to a direct "
                "URL of the primary"
            )
        if self.postgres_listen_url and not (self.is_postgres and is_postgres_url(self.postgres_listen_url)):
            raise ValueError("store.postgres_listen_url is a postgresql:// URL, for a PostgreSQL store only")
        if self.wait_for_replicas and self.is_postgres:
            raise ValueError(
                "a PostgreSQL store waits for its replicas as PostgreSQL is told to (synchronous_standby_names): "
                "leave store.wait_for_replicas at 0"
            )
        return self

    @property
    def is_memory(self) -> bool:
        return self.url.startswith("memory://")

    @property
    def is_postgres(self) -> bool:
        return is_postgres_url(self.url)

    @property
    def step_logs(self) -> tuple[int, int]:
        """What a step keeps of its log records: (``step_log_records``, ``step_log_bytes``)."""
        return self.step_log_records, self.step_log_bytes

    @property
    def stalled_after_s(self) -> float:
        """How long a run no step holds a live lease of, touched by nothing, waits before the stall sweep
        re-drives it (``stalled_run_after_s``)."""
        return self.stalled_run_after_s


class RetriesConfig(_Section):
    """Default retry policy of every actor (an actor's own options win)."""

    max_retries: int = Field(default=5, ge=0)
    """Retries of a failed message before it is dead-lettered."""
    min_backoff_s: float = Field(default=1.0, gt=0)
    """The first retry's backoff bound. The n-th waits 0..min(max, min * 2^n) (full jitter)."""
    max_backoff_s: float = Field(default=300.0, gt=0)
    """The longest backoff bound."""
    permanent_errors: tuple[str, ...] = ("pydantic.ValidationError", "pipelines.errors.DefinitionError")
    """Exception classes never retried, as dotted names. An actor's `throws` adds its own."""

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
    """The longest one actor call may run before it is interrupted."""
    local_steps: bool = True
    """Run a chain's next step in the worker where the step before it finished, when it can."""
    heartbeat_s: float = Field(default=5.0, gt=0, le=300)
    """How often each worker process records its heartbeat in the run store (what `pipelines workers` shows)."""


class ProfilesConfig(_Section):
    """Defaults of the actor profiles (``profile=`` on an actor; see ``pipelines.profiles``)."""

    fire_and_forget_max_retries: int = Field(default=3, ge=0)
    """`fire_and_forget`: retries before a failed message is dropped."""
    ordered_partitions: int = Field(default=8, ge=1, le=1024)
    """`ordered`: partitions (queues) per actor."""
    ordered_max_backoff_s: float = Field(default=30.0, gt=0)
    """`ordered`: the longest wait before a retry in place."""
    long_running_queue: str = "long_running"
    """`long_running`: the Dramatiq queue such actors move to."""
    long_running_lease_s: float = Field(default=60.0, ge=1)
    """`long_running`: the lease a running job renews by heartbeat."""
    scheduled_grace_s: float = Field(default=90.0, gt=0)
    """`scheduled`: how late a tick may be before it counts as missed."""

    @field_validator("long_running_queue")
    @classmethod
    def _queue_word(cls, queue: str) -> str:
        if not is_valid_actor_name(queue):
            raise ValueError("expected a Dramatiq queue name of letters, digits, '_' or '-', such as 'long_running'")
        return queue


class EncryptionConfig(_Section):
    """Keys of payload encryption (Fernet: AES-128-CBC with HMAC-SHA256): the first encrypts, all decrypt."""

    keys: tuple[str, ...] = ()
    """Fernet keys, newest first. The first encrypts; all decrypt. Set them from your secret store."""

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
    """Worker log lines: `json` (one object a line) or `text`."""
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """The lowest level logged."""


class TelemetryConfig(_Section):
    """OpenTelemetry tracing, exported over OTLP."""

    enabled: bool = False
    """Export OpenTelemetry traces, one trace per run."""
    endpoint: str = "http://127.0.0.1:4318"
    """The OTLP endpoint. Jaeger takes OTLP/HTTP on 4318 and gRPC on 4317."""
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    """`http/protobuf`, or `grpc` (needs the `grpc` extra)."""
    service_name: str = "rabbit-pipelines"
    """The service name on every span."""
    sample_ratio: float = Field(default=0.1, ge=0, le=1)
    """The share of runs traced whole, 0 to 1."""
    keep_failed: bool = True
    """Export a failed step's span even when its run is not sampled."""
    keep_slower_than_s: float = Field(default=5.0, ge=0)
    """Export a step's span when it took this long, even unsampled. 0 turns it off."""
    resource_attributes: dict[str, str] = Field(default_factory=dict)
    """Extra resource attributes on every span, such as `deployment.environment`."""

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, endpoint: str) -> str:
        return check_url(endpoint, ("http", "https"))


class MetricsConfig(_Section):
    """Prometheus metrics of worker processes, exposed on one port (prometheus-client multiprocess mode)."""

    enabled: bool = False
    """Serve Prometheus metrics from each `dramatiq` worker."""
    host: str = "127.0.0.1"
    """The address the metrics are served on."""
    port: int = Field(default=9191, ge=1, le=65535)
    """The port the metrics and `/healthz` are served on."""
    multiprocess: bool = True
    """Share samples between worker processes through files (prometheus-client's multiprocess mode)."""
    multiprocess_dir: Path | None = None
    """Where those files go. Default: `$PROMETHEUS_MULTIPROC_DIR`, else the temporary directory."""
    queue_sample_interval_s: float = Field(default=15.0, gt=0)
    """How often queue and dead-letter depths are read from RabbitMQ."""
    heartbeat_interval_s: float = Field(default=10.0, gt=0)
    """How often each worker process writes its heartbeat."""


#: The shortest console token taken: one a person would pick can be guessed.
MIN_TOKEN_CHARS = 16


class UiConfig(_Section):
    """The web console (``pipelines ui``): where it listens, the token its actions need, links out."""

    host: str = "127.0.0.1"
    """The address the console listens on."""
    port: int = Field(default=8181, ge=1, le=65535)
    """The console's port."""
    token: str = ""
    """The token cancel, replay and purge need (16 characters at least). Empty: read-only."""
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    """Host names the console answers to, against DNS rebinding."""
    jaeger_url: str = ""
    """Jaeger's UI, to link each run's trace. Empty shows the trace id only."""
    metrics_urls: tuple[str, ...] = ()
    """The workers' metrics endpoints. Empty reads `[metrics] host` and `port`."""
    refresh_s: float = Field(default=2.0, ge=0.5, le=300)
    """How often open pages refresh."""

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
