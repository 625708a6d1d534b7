"""What the PostgreSQL store does in transactions that are not its own: runs recorded in the caller's
transaction with their first messages in the outbox (published by a worker's relay once it commits), and
a step's transaction lent to its actor until the step's completion commits it.

The outbox is told of each start by a notification sent when the caller commits (``pg_notify`` is
transactional); a relay takes the oldest entries with ``FOR UPDATE SKIP LOCKED`` (relays of other workers
take others), publishes them with confirms and deletes them in the same transaction. A relay that dies
mid-way leaves its entries to the next: a start is published at least once, and its steps' claims run it
once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from pipelines.errors import DefinitionError
from pipelines.store.base import NewRun
from pipelines.store.postgres.feed import listen, next_notified
from pipelines.store.postgres.shared import NOW_MS, Connections
from pipelines.store.postgres.statements import Statement, Writes, run, run_async
from pipelines.store.postgres.steps import RunSteps

#: Most outbox entries one relay call publishes (one confirmed publish, one transaction).
OUTBOX_BATCH = 200


class TransactionalRuns(RunSteps):
    """``TransactionalStarts``, ``OutboxRelaying`` and ``StepTransactions`` on PostgreSQL."""

    def create_runs_in(self, connection: Any, runs: Sequence[tuple[NewRun, str]]) -> list[tuple[str, bool]]:
        _check_caller(connection)
        self._c.ready()
        alone = connection.autocommit and connection.info.transaction_status == pq.TransactionStatus.IDLE
        with (
            self._c.answering(),
            connection.transaction() if alone else nullcontext(),
            connection.cursor(row_factory=dict_row) as cur,
        ):
            return run(cur, self._starts(runs))

    async def create_runs_in_async(self, connection: Any, runs: Sequence[tuple[NewRun, str]]) -> list[tuple[str, bool]]:
        _check_caller(connection)
        await asyncio.to_thread(self._c.ready)
        alone = connection.autocommit and connection.info.transaction_status == pq.TransactionStatus.IDLE
        with self._c.answering():
            if alone:  # an autocommit connection outside a transaction: the start is one of its own
                async with connection.transaction(), connection.cursor(row_factory=dict_row) as cur:
                    return await run_async(cur, self._starts(runs))
            async with connection.cursor(row_factory=dict_row) as cur:
                return await run_async(cur, self._starts(runs))

    def _starts(self, runs: Sequence[tuple[NewRun, str]]) -> Writes[list[tuple[str, bool]]]:
        """Each run recorded and, if this created it, its outbox entry; the relays told at commit."""
        outcomes = []
        for record, entry in runs:
            run_id, created = yield from self._creation(record)
            if created:
                yield Statement(
                    f"INSERT INTO {self._s}.outbox (ns, run_id, messages, created_at) VALUES (%s, %s, %s, {NOW_MS})",
                    [self._ns, run_id, entry],
                )
            outcomes.append((run_id, created))
        if any(created for _, created in outcomes):
            yield Statement("SELECT pg_notify(%s, %s)", [self._channel, self._outbox_payload])
        return outcomes

    @property
    def _outbox_payload(self) -> str:
        """What the schema's channel carries for a start committed in this namespace."""
        return f"outbox {self._ns}"

    def relay_outbox(self, publish: Callable[[Sequence[tuple[str, str]]], None]) -> int:
        with self._c.transaction() as cur:
            cur.execute(
                f"SELECT id, run_id, messages FROM {self._s}.outbox WHERE ns = %s ORDER BY id LIMIT %s "
                "FOR UPDATE SKIP LOCKED",
                [self._ns, OUTBOX_BATCH],
            )
            rows = cur.fetchall()
            if not rows:
                return 0
            publish([(row["run_id"], row["messages"]) for row in rows])
            cur.execute(
                f"DELETE FROM {self._s}.outbox WHERE ns = %s AND id = ANY(%s)", [self._ns, [row["id"] for row in rows]]
            )
            return len(rows)

    def outbox_wakeups(self) -> _Wakeups:
        conn = self._c.dedicated()
        with self._c.answering():
            listen(conn, self._channel)
        return _Wakeups(conn, self._outbox_payload, self._c)

    def begin_step_transaction(self) -> HeldStepTransaction:
        return HeldStepTransaction(self._c)


class _Wakeups:
    """The outbox's notifications, heard on a connection of their own."""

    def __init__(self, conn: psycopg.Connection[Any], payload: str, connections: Connections) -> None:
        self._conn = conn
        self._payload = payload
        self._c = connections

    def wait(self, timeout_s: float) -> bool:
        with self._c.answering():
            return next_notified(self._conn, (self._payload,), timeout_s) is not None

    def close(self) -> None:
        self._conn.close()


class HeldStepTransaction:
    """A pooled connection in a transaction (``BEGIN`` sent), held until :meth:`commit` or :meth:`rollback`."""

    def __init__(self, connections: Connections) -> None:
        self.connections = connections
        self._stack = ExitStack()
        with connections.answering():
            self.connection: psycopg.Connection[Any] = self._stack.enter_context(connections.connection())
            try:
                self.connection.execute("BEGIN")
            except BaseException:
                self._stack.close()
                raise

    @contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in the transaction, its statements pipelined (as the store's own transactions)."""
        with (
            self.connections.answering(),
            self.connection.pipeline(),
            self.connection.cursor(row_factory=dict_row) as c,
        ):
            yield c

    def commit(self) -> None:
        """Commit, and give the connection back."""
        try:
            with self.connections.answering():
                self.connection.execute("COMMIT")
        finally:
            self._stack.close()

    def rollback(self) -> None:
        try:
            if not self.connection.closed:
                self.connection.execute("ROLLBACK")
        except psycopg.Error:
            pass  # a broken connection: the server rolled back; the pool discards it
        finally:
            self._stack.close()


def _check_caller(connection: Any) -> None:
    """The caller's connection must be psycopg's and its transaction not failed."""
    if not isinstance(connection, (psycopg.Connection, psycopg.AsyncConnection)):
        raise DefinitionError(
            f"connection= takes a psycopg 3 connection (psycopg.Connection or AsyncConnection), not "
            f"{type(connection).__name__}: the run is written in that connection's transaction."
        )
    if connection.info.transaction_status == pq.TransactionStatus.INERROR:
        raise DefinitionError(
            "The connection's transaction has failed (a statement before the start raised): roll it back "
            "before starting a run in it."
        )
