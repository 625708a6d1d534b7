"""Run stores: the Lua scripts in ``lua/``, run by Redis or by an in-process Redis, and PostgreSQL.

``roles`` splits the store into the roles its consumers take, ``base`` holds the records they pass
(``step_history`` what a step keeps beside its state: its attempts, replays and logs), ``redis`` runs
one script per decision (``redis_reads`` reads runs) and ``replies`` decodes each script's reply. ``memory://``
(the embedded mode: the demo's fallback, unit tests, ``pipelines.testing``) runs the same scripts on
an in-process server of its own (``embedded``), so the Redis store's meaning is written once.
``postgres`` holds that meaning in SQL transactions, for what only a database can give (a run started
in the caller's own transaction); the contract tests of every role hold the two meanings together.

Why not a Python mirror held to the scripts by a differential test: the mirror (487 lines, a hand-kept
copy of ``complete.lua``) had drifted already, and every later change to the store (scripts merged
for fewer round trips, fail-closed checks, new fields) would have been made twice and tested twice.
What running the scripts in process costs, measured 2026-12-01 on this project's 2-core machine:

* a store operation takes about 0.7 ms in process (6 µs in the Python mirror, 0.17 ms on a local
  Redis): nothing for a test's few steps, seconds for a fan-out of thousands (the demo's 2,000-member
  campaign: ``pipelines demo --embedded`` took 1.2 s with the mirror, 4.6 to 5.0 s now);
* the embedded tests (``pytest tests/ -k memory``): the same 106 tests 24.7 s with the mirror, 25.7 s
  on the scripts (CPU 3.3 s, 4.4 s); with the per-role contract tests added, 133 tests in 26.2 s;
* fakeredis and lupa (2.6 MB of wheels, about 7.5 MB installed) are imported only by a ``memory://``
  store (36 ms);
* waiting on a run blocks on pub/sub as on Redis, without polling (fakeredis 2.39 or later).
"""

from __future__ import annotations

from pipelines.config.sections import StoreConfig
from pipelines.errors import ConfigError
from pipelines.store.base import (
    Advance,
    Claim,
    DeadlineCheck,
    LeaseCheck,
    NewRun,
    RunStatus,
    SlotTake,
    StallCheck,
    StalledGroup,
    StepStatus,
)
from pipelines.store.embedded import EMBEDDED_URL, embedded_store
from pipelines.store.redis import RedisRunStore
from pipelines.store.roles import (
    JobLeases,
    KeyClaims,
    OnceMarks,
    RateSlots,
    RunPlans,
    RunStates,
    RunSteps,
    RunStore,
    RunViews,
    ScheduleTicks,
    StallChecks,
    StepLogs,
    StepProgress,
    StepReplays,
    StoreLifecycle,
)

__all__ = [
    "EMBEDDED_URL",
    "Advance",
    "Claim",
    "DeadlineCheck",
    "JobLeases",
    "KeyClaims",
    "LeaseCheck",
    "NewRun",
    "OnceMarks",
    "RateSlots",
    "RedisRunStore",
    "RunPlans",
    "RunStates",
    "RunStatus",
    "RunSteps",
    "RunStore",
    "RunViews",
    "ScheduleTicks",
    "SlotTake",
    "StallCheck",
    "StallChecks",
    "StalledGroup",
    "StepLogs",
    "StepProgress",
    "StepReplays",
    "StepStatus",
    "StoreLifecycle",
    "embedded_store",
    "make_store",
]


def make_store(config: StoreConfig, *, namespace: str) -> RunStore:
    """The store ``config.url`` names: ``memory://`` (in process), a PostgreSQL URL or a Redis URL.

    Raises:
        ConfigError: A PostgreSQL URL, but psycopg is not installed.
    """
    if config.is_memory:
        return embedded_store(namespace=namespace, retention_s=config.retention_s, step_logs=config.step_logs)
    if config.is_postgres:
        try:  # imported here: psycopg is an extra, and a Redis store's process never loads it
            from pipelines.store.postgres import PostgresRunStore
        except ImportError as e:
            raise ConfigError(
                f"store.url names PostgreSQL, but {e.name} is not installed. Install the extra: "
                "pip install 'rabbit-pipelines[postgres]'."
            ) from None
        return PostgresRunStore(
            url=config.url,
            namespace=namespace,
            retention_s=config.retention_s,
            schema=config.postgres_schema,
            step_logs=config.step_logs,
            pooled=config.postgres_pooled,
            listen_url=config.postgres_listen_url or None,
        )
    return RedisRunStore(
        url=config.url,
        namespace=namespace,
        retention_s=config.retention_s,
        wait_for_replicas=config.wait_for_replicas,
        replica_wait_ms=config.replica_wait_ms,
        step_log_records=config.step_log_records,
        step_log_bytes=config.step_log_bytes,
    )
