"""Writes the store makes on a connection that may be blocking or asyncio: a generator yields each
statement and receives the row it asked for, and :func:`run` or :func:`run_async` sends them. One text
of the SQL serves both (a run started in the caller's transaction, with ``psycopg``'s ``Connection``
or ``AsyncConnection``).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import psycopg
from psycopg.rows import DictRow

T = TypeVar("T")


@dataclass(frozen=True)
class Statement:
    """One statement: ``one`` reads its first row, ``none`` reads nothing, ``many`` runs once per parameters."""

    sql: str
    params: Sequence[Any]
    reads: Literal["one", "none", "many"] = "none"


#: A write: statements out, each one's row (or None) back, its result at the end.
Writes = Generator[Statement, DictRow | None, T]


def run(cur: psycopg.Cursor[DictRow], writes: Writes[T]) -> T:
    """Send ``writes`` on a blocking cursor; their result."""
    try:
        statement = next(writes)
        while True:
            statement = writes.send(_execute(cur, statement))
    except StopIteration as done:
        result: T = done.value
        return result


async def run_async(cur: psycopg.AsyncCursor[DictRow], writes: Writes[T]) -> T:
    """Send ``writes`` on an asyncio cursor; their result."""
    try:
        statement = next(writes)
        while True:
            if statement.reads == "many":
                await cur.executemany(statement.sql, statement.params)
                row = None
            else:
                await cur.execute(statement.sql, statement.params)
                row = await cur.fetchone() if statement.reads == "one" else None
            statement = writes.send(row)
    except StopIteration as done:
        result: T = done.value
        return result


def _execute(cur: psycopg.Cursor[DictRow], statement: Statement) -> DictRow | None:
    if statement.reads == "many":
        cur.executemany(statement.sql, statement.params)
        return None
    cur.execute(statement.sql, statement.params)
    return cur.fetchone() if statement.reads == "one" else None
