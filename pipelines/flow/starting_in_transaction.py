"""Starting runs in the caller's transaction (``app.start(..., connection=conn)``): each run recorded on the
caller's PostgreSQL connection, its first messages and its deadline check left in the outbox, published by
a worker's relay once the caller commits; a rollback leaves nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dramatiq

from pipelines.broker.common import PipelineBroker
from pipelines.composition import Node
from pipelines.errors import DefinitionError
from pipelines.flow.deadlines import deadline_check
from pipelines.flow.outbox import outbox_entry
from pipelines.flow.starting import Origin, RunStarts
from pipelines.store.base import NewRun
from pipelines.store.roles.transactions import TransactionalStarts


class StartsInTransaction(RunStarts):
    """:class:`~pipelines.flow.starting.RunStarts`, and runs started in the caller's transaction."""

    def start_in(
        self,
        connection: Any,
        broker: PipelineBroker,
        runs: Sequence[tuple[Node, tuple[Any, ...], Mapping[str, Any] | None]],
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
        delay_ms: int | None = None,
        first_options: Mapping[str, Any] | None = None,
        origin: Origin | None = None,
    ) -> list[tuple[str, bool]]:
        """Record runs in the caller's transaction on ``connection``, their first messages in the outbox.

        Nothing is published here: once the caller commits, a worker's relay publishes them; a rollback
        leaves no run and no message. Returns (run id, created) per run, as :meth:`start_many`.

        Raises:
            DefinitionError: The run store cannot write in the caller's transaction (not PostgreSQL).
        """
        store = self._transactional()
        with self._preparing(
            broker,
            runs,
            name=name,
            idempotency_key=idempotency_key,
            deadline_s=deadline_s,
            delay_ms=delay_ms,
            origin=origin,
        ) as prepared:
            entries = self._entries(broker, prepared, first_options, deadline_s, delay_ms)
            return store.create_runs_in(connection, entries)

    async def start_in_async(
        self,
        connection: Any,
        broker: PipelineBroker,
        runs: Sequence[tuple[Node, tuple[Any, ...], Mapping[str, Any] | None]],
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
    ) -> list[tuple[str, bool]]:
        """:meth:`start_in` on an asyncio connection (``psycopg.AsyncConnection``)."""
        store = self._transactional()
        with self._preparing(
            broker, runs, name=name, idempotency_key=idempotency_key, deadline_s=deadline_s
        ) as prepared:
            entries = self._entries(broker, prepared, None, deadline_s, None)
            return await store.create_runs_in_async(connection, entries)

    def _transactional(self) -> TransactionalStarts:
        if not isinstance(self.store, TransactionalStarts):
            raise DefinitionError(
                "Starting a run in your transaction (connection=) needs the PostgreSQL run store: set "
                f"store.url = 'postgresql://...' (this app's store is {type(self.store).__name__})."
            )
        return self.store

    @staticmethod
    def _entries(
        broker: PipelineBroker,
        prepared: Sequence[tuple[NewRun, list[dramatiq.Message[Any]]]],
        first_options: Mapping[str, Any] | None,
        deadline_s: float | None,
        delay_ms: int | None,
    ) -> list[tuple[NewRun, str]]:
        """Each run with its outbox entry: its first messages and its deadline check, each with its delay."""
        entries = []
        for record, messages in prepared:
            sends = [(m.copy(options=dict(first_options)) if first_options else m, delay_ms or 0) for m in messages]
            check = deadline_check(broker, record.run_id, deadline_s)
            entries.append((record, outbox_entry(sends + ([check] if check is not None else []))))
        return entries
