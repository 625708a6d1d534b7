"""Following runs on PostgreSQL without polling: every change of a run is notified (``pg_notify``, sent
when its transaction commits) on the schema's channel with ``<namespace> <run id>``; a waiter listens on
a connection of its own (``LISTEN`` is a session's state: not a pooled connection) and wakes only for the
runs it follows."""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from pipelines.store.base import RunStatus
from pipelines.store.waiting import wait_for_end


def listen(conn: psycopg.Connection[Any], channel: str) -> None:
    """Start hearing ``channel`` on ``conn``."""
    conn.execute(f'LISTEN "{channel}"')


def next_notified(conn: psycopg.Connection[Any], payloads: Collection[str], timeout_s: float) -> str | None:
    """The first notification among ``payloads`` within ``timeout_s``, or None."""
    if timeout_s <= 0 or not payloads:
        return None
    for notification in conn.notifies(timeout=timeout_s):
        if notification.payload in payloads:
            return notification.payload
    return None


def wait_on_notifications(
    conn: psycopg.Connection[Any],
    channel: str,
    payload: str,
    *,
    ended: Callable[[], bool],
    read: Callable[[], RunStatus | None],
    timeout_s: float | None,
    on_change: Callable[[RunStatus], None] | None,
) -> None:
    """Block until the run notified as ``payload`` has ended (or ``timeout_s`` passed), handing its snapshots
    to ``on_change`` (see :func:`~pipelines.store.waiting.wait_for_end`); closes ``conn``."""
    try:
        listen(conn, channel)  # before reading, so a change between the two is not missed
        wait_for_end(
            lambda timeout: next_notified(conn, (payload,), timeout),
            ended=ended,
            read=read,
            timeout_s=timeout_s,
            on_change=on_change,
        )
    finally:
        conn.close()


class PostgresRunFeed:
    """:class:`~pipelines.store.base.RunFeed` on the schema's channel: one connection, however many runs."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        channel: str,
        namespace: str,
        answering: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._conn = conn
        self._namespace = namespace
        self._answering = answering
        self._runs: set[str] = set()
        with answering():
            listen(conn, channel)

    def follow(self, run_id: str) -> None:
        self._runs.add(f"{self._namespace} {run_id}")

    def unfollow(self, run_id: str) -> None:
        self._runs.discard(f"{self._namespace} {run_id}")

    def next_change(self, timeout_s: float) -> str | None:
        with self._answering():
            found = next_notified(self._conn, self._runs, timeout_s)
        return found.split(" ", 1)[1] if found is not None else None

    def close(self) -> None:
        self._conn.close()
