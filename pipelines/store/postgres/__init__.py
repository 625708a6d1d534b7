"""Run store on PostgreSQL: every role of :class:`~pipelines.store.roles.RunStore`, with the meaning of the
Redis store's Lua scripts, each decision one transaction that locks the run's row (``SELECT ... FOR
UPDATE``) as a script holds Redis.

``store.url = "postgresql://..."`` selects it (psycopg 3 and its pool: ``pip install
'rabbit-pipelines[postgres]'``); its tables live in the schema ``store.postgres_schema`` names, created and
upgraded by numbered migrations (:mod:`~pipelines.store.postgres.schema`) at the store's first call or by
``pipelines store migrate``. Waiting on a run listens for its notifications (``LISTEN``/``NOTIFY``)
instead of polling.

================ ====================================================================================
module           what it holds
================ ====================================================================================
``schema``       the tables and their migrations
``connection``   the pool, the first call's migration, PostgreSQL's failures as ``StoreUnavailable``
``steps``        runs created; steps claimed, failed, reopened, renewed; deadlines; progress
``completion``   a step's completion and what follows it
``step_history`` a step's history of attempts and replays, its attempts' logs
``views``        runs read, awaited, found; plans and results
``feed``         notifications of run changes
``transactions`` runs started in the caller's transaction, the outbox relayed, a step's own transaction
``statements``   writes sent on a blocking or an asyncio connection alike
``records``      idempotency keys, once marks, job leases, schedule ticks, rate slots
``workers``      worker processes' heartbeats and message counts
``stalls``       keep-alives, the stall sweep and the lapse sweep
================ ====================================================================================
"""

from __future__ import annotations

from pipelines.store.postgres.completion import StepCompletion
from pipelines.store.postgres.connection import Connections
from pipelines.store.postgres.records import Records
from pipelines.store.postgres.stalls import RunStalls
from pipelines.store.postgres.transactions import TransactionalRuns
from pipelines.store.postgres.views import RunViews
from pipelines.store.postgres.workers import WorkerRecords
from pipelines.store.step_history import STEP_LOG_BOUNDS

#: The schema the store's tables live in unless ``store.postgres_schema`` names another.
DEFAULT_SCHEMA = "pipelines"


class PostgresRunStore(TransactionalRuns, StepCompletion, RunViews, Records, WorkerRecords, RunStalls):
    """Every role of :class:`~pipelines.store.roles.RunStore`, on PostgreSQL.

    Nothing connects until the first call, which creates or upgrades the store's tables in ``schema``
    when they lag behind this release (:meth:`migrate` does it on its own). A step keeps its newest log
    records, ``step_logs`` (records, bytes) at most over its attempts. ``pooled``: ``url`` goes through a
    pooler in transaction mode (no prepared statements); ``listen_url``, where ``LISTEN`` connects instead.
    """

    def __init__(
        self,
        *,
        url: str,
        namespace: str,
        retention_s: int,
        schema: str = DEFAULT_SCHEMA,
        step_logs: tuple[int, int] = STEP_LOG_BOUNDS,
        pooled: bool = False,
        listen_url: str | None = None,
    ) -> None:
        super().__init__(
            connections=Connections(url=url, schema=schema, pooled=pooled, listen_url=listen_url),
            namespace=namespace,
            retention_ms=retention_s * 1000,
            step_logs=step_logs,
        )

    @property
    def schema(self) -> str:
        return self._c.schema

    def migrate(self) -> list[int]:
        """Create or upgrade the store's tables; the versions of the migrations applied (none: up to date)."""
        return self._c.migrate()

    def ping(self) -> None:
        with self._c.connection() as conn:
            conn.execute("SELECT 1")

    def close(self) -> None:
        self._c.close()

    def drop_schema(self) -> None:
        """Drop the store's schema and everything in it, every namespace's runs with it (tests, maintenance)."""
        with self._c.answering(), Connections.direct(self._c.url) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self._c.s} CASCADE")
