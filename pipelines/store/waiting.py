"""Waiting for a run's end, whatever tells the waiter that the run changed (a Redis channel, PostgreSQL's
notifications): the run read again after each change, its snapshots handed on at a bounded rate."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipelines.store.base import RunStatus

#: Fastest rate at which ``wait_run`` hands changes to its ``on_change`` callback.
CHANGE_CALLBACK_INTERVAL_S = 0.2
#: Longest a waiter sleeps on its subscription before re-reading the run (a dropped subscription).
LIVENESS_CHECK_S = 30.0


def wait_for_end(
    next_change: Callable[[float], object],
    *,
    ended: Callable[[], bool],
    read: Callable[[], RunStatus | None],
    timeout_s: float | None,
    on_change: Callable[[RunStatus], None] | None,
) -> None:
    """Block until the run has ended (or ``timeout_s`` passed), handing its snapshots to ``on_change`` at
    most every :data:`CHANGE_CALLBACK_INTERVAL_S`. ``next_change(timeout_s)`` returns after the run's
    next change, or the timeout; the caller subscribes before it calls this, so no change is missed."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
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
        # A bound on the wait only guards against a silently dropped subscription.
        next_change(min(remaining, LIVENESS_CHECK_S) if remaining else LIVENESS_CHECK_S)
