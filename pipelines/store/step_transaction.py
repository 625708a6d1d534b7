"""A step's own transaction: ``with pipelines.transaction() as conn:`` inside a pipeline step lends the actor
a connection to the run store's database, in a transaction that stays open until the step ends. The
step's completion commits it, so the actor's writes and the step's result commit together or not at all:
a step killed, stalled or delivered twice writes once, with no key of the user's.

The ``PipelineSteps`` middleware says when a step begins and ends (``step_began``, ``step_ended``);
the store's completion takes the open transaction (``held``) and commits or rolls it back.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipelines.errors import DefinitionError
from pipelines.store.roles.transactions import HeldTransaction, StepTransactions

if TYPE_CHECKING:
    import psycopg

__all__ = ["held", "holding", "step_began", "step_ended", "transaction"]


@dataclass
class _Step:
    """The step running on this thread: its store, and the transaction it holds (if its actor asked)."""

    store: object
    held: HeldTransaction | None = None


_step: contextvars.ContextVar[_Step | None] = contextvars.ContextVar("pipeline_step_transaction", default=None)


def step_began(store: object) -> None:
    """A pipeline step starts on this thread; ``store`` is its run store."""
    _step.set(_Step(store))


def step_ended() -> None:
    """The step ended: a transaction its completion did not take is rolled back."""
    step = _step.get()
    _step.set(None)
    if step is not None and step.held is not None:
        step.held.rollback()


def holding() -> bool:
    """Whether the running step holds a transaction of its own (its actor opened one)."""
    step = _step.get()
    return step is not None and step.held is not None


def held() -> HeldTransaction | None:
    """The running step's open transaction, handed over to its completion (which commits or rolls it back)."""
    step = _step.get()
    if step is None or step.held is None:
        return None
    taken, step.held = step.held, None
    return taken


@contextmanager
def transaction() -> Iterator[psycopg.Connection[Any]]:
    """A connection in the running step's transaction, on the PostgreSQL run store's database.

    What the block writes commits with the step's completion, after the actor returns: the step's result,
    what follows it and these writes commit together, or none of them does. An error that leaves the block
    undoes the block's writes (a savepoint); a step that fails, is killed or finds its claim lost writes
    nothing. Several blocks in one step share the transaction.

    Raises:
        DefinitionError: Not inside a pipeline step, or the run store is not PostgreSQL.
    """
    step = _step.get()
    if step is None:
        raise DefinitionError(
            "pipelines.transaction() works inside a pipeline step (an actor run as a step of a run): its "
            "writes commit with the step's completion. Elsewhere, open a transaction of your own."
        )
    if not isinstance(step.store, StepTransactions):
        raise DefinitionError(
            "pipelines.transaction() needs the PostgreSQL run store: set store.url = "
            f"'postgresql://...' (this app's store is {type(step.store).__name__})."
        )
    if step.held is None:
        step.held = step.store.begin_step_transaction()
    connection = step.held.connection
    with connection.transaction():
        yield connection
