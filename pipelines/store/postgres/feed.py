"""Following runs on PostgreSQL without polling: every change of a run is notified (``pg_notify``, sent
when its transaction commits) on the schema's channel with ``<namespace> <run id>``; a waiter listens on
a connection of its own (``LISTEN`` is a session's state: not a pooled connection) and wakes only for the
runs it follows."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

import psycopg

from pipelines.store.base import RunStatus
from pipelines.store.feed import CHANGE_CALLBACK_INTERVAL_S, LIVENESS_CHECK_S


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
    to ``on_change`` at most every ``CHANGE_CALLBACK_INTERVAL_S``; closes ``conn``."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        listen(conn, channel)  # before reading, so a change between the two is not missed
        last_callback = 0.0
        while True:
            if on_change is None:
                if ended():
                    return
            else:
                snapshot = read()
                if snapshot is None or snapshot.is_final:
                    return
                if time.monotonic() - last_callback >= CHANGE_CALLBACK_INTERVAL_S:
                    on_change(snapshot)
                    last_callback = time.monotonic()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            # A bound on the wait only guards against a connection silently lost.
            next_notified(conn, (payload,), min(remaining, LIVENESS_CHECK_S) if remaining else LIVENESS_CHECK_S)
    finally:
        conn.close()


class PostgresRunFeed:
    """:class:`~pipelines.store.base.RunFeed` on the schema's channel: one connection, however many runs."""

    def __init__(self, conn: psycopg.Connection[Any], channel: str, namespace: str) -> None:
        self._conn = conn
        self._namespace = namespace
        self._runs: set[str] = set()
        listen(conn, channel)

    def follow(self, run_id: str) -> None:
        self._runs.add(f"{self._namespace} {run_id}")

    def unfollow(self, run_id: str) -> None:
        self._runs.discard(f"{self._namespace} {run_id}")

    def next_change(self, timeout_s: float) -> str | None:
        found = next_notified(self._conn, self._runs, timeout_s)
        return found.split(" ", 1)[1] if found is not None else None

    def close(self) -> None:
        self._conn.close()
