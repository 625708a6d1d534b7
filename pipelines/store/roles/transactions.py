"""What only a store in the application's own database gives (the PostgreSQL store): runs started in the
caller's transaction, their first messages relayed from an outbox once it commits, and a step's own
transaction, in which the actor's writes and the step's completion commit together.

These roles are not part of :class:`~pipelines.store.roles.RunStore`: a Redis store has none of them, and
the app says so when they are asked of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from pipelines.store.base import NewRun


@runtime_checkable
class TransactionalStarts(Protocol):
    """Runs recorded in the caller's transaction, each with its first messages in the outbox."""

    def create_runs_in(self, connection: Any, runs: Sequence[tuple[NewRun, str]]) -> list[tuple[str, bool]]:
        """Record ``runs`` on the caller's ``connection`` (a ``psycopg.Connection``), in its transaction.

        Each item is a run and its outbox entry (the messages to publish once the transaction commits, as
        text); the entry is kept only for a run this call created. Nothing is committed here: the caller's
        commit makes the runs and their entries visible, a rollback leaves nothing. Returns (run id,
        created) per run, as ``create_runs`` does.
        """

    async def create_runs_in_async(self, connection: Any, runs: Sequence[tuple[NewRun, str]]) -> list[tuple[str, bool]]:
        """:meth:`create_runs_in` on a ``psycopg.AsyncConnection``."""


class OutboxWakeups(Protocol):
    """A subscription to the outbox's notifications (a committed start)."""

    def wait(self, timeout_s: float) -> bool:
        """Whether a start was committed within ``timeout_s``."""

    def close(self) -> None: ...


@runtime_checkable
class OutboxRelaying(Protocol):
    """The outbox emptied by a worker's relay: committed entries published, then deleted."""

    def relay_outbox(self, publish: Callable[[Sequence[tuple[str, str]]], None]) -> int:
        """Hand the oldest committed entries, (run id, messages), to ``publish``, and delete them once it returns.

        Entries another relay is publishing are skipped; if ``publish`` raises, the entries stay for the
        next call. Returns how many were published (fewer than a batch: the outbox is empty).
        """

    def outbox_wakeups(self) -> OutboxWakeups:
        """Hear each commit of a start (before relaying, so that none between the two is missed)."""


class HeldTransaction(Protocol):
    """A transaction a step holds open on the store's database until its completion commits it."""

    @property
    def connection(self) -> Any:
        """The transaction's connection (a ``psycopg.Connection``)."""

    def rollback(self) -> None:
        """Roll back and give the connection back (nothing of the step's writes stays)."""


@runtime_checkable
class StepTransactions(Protocol):
    """A step's own transaction, lent to its actor; the step's completion commits it."""

    def begin_step_transaction(self) -> HeldTransaction:
        """A transaction on a connection of the store's, open until the step completes or fails."""
