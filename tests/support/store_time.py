"""Time moved in a test's run store, on every kind: a run's deadline, its last touch and the stall sweep's
clock written into the past (a threshold is a point in time: no waiting for the clock), and whether the
sweep still holds a run as going."""

from __future__ import annotations

import time

import psycopg

from pipelines.store import RedisRunStore, RunStore
from pipelines.store.postgres import PostgresRunStore
from pipelines.wire.naming import running_runs_key, stall_sweep_key


def _sql(store: PostgresRunStore, statement: str, *values: object) -> list[tuple[object, ...]]:
    """Run ``statement`` (``{s}``: the store's schema) on a connection of its own; its rows, if any."""
    with psycopg.connect(store._c.url, autocommit=True) as conn:
        cursor = conn.execute(statement.format(s=store._c.s), values)
        return cursor.fetchall() if cursor.description else []


def pass_deadline(store: RunStore, run_id: str) -> None:
    """Move the run's deadline into the past."""
    if isinstance(store, PostgresRunStore):
        _sql(store, "UPDATE {s}.runs SET deadline_at = 1 WHERE ns = %s AND run_id = %s", store._ns, run_id)
        return
    assert isinstance(store, RedisRunStore)
    store._redis.hset(store._key(run_id), "deadline_at", 1)


def untouch(store: RunStore, run_id: str) -> None:
    """Make the run look untouched for ages, and the sweep as if it had looked without a gap since."""
    now_ms = int(time.time() * 1000)
    if isinstance(store, PostgresRunStore):
        _sql(store, "UPDATE {s}.runs SET touched = 1, stall_due = 1 WHERE ns = %s AND run_id = %s", store._ns, run_id)
        _sql(
            store,
            "INSERT INTO {s}.stall_clock (ns, seen, resumed) VALUES (%s, %s, 1) ON CONFLICT (ns) DO UPDATE SET "
            "seen = excluded.seen, resumed = 1",
            store._ns,
            now_ms,
        )
        return
    assert isinstance(store, RedisRunStore)
    store._redis.hset(store._key(run_id), "touched", 1)
    store._redis.zadd(running_runs_key(store._namespace), {run_id: 1})
    store._redis.hset(stall_sweep_key(store._namespace), mapping={"resumed": 1, "seen": now_ms})


def stop_sweeping_since_the_epoch(store: RunStore) -> None:
    """Make the sweep's clock say that nothing swept since the epoch (a gap in sweeping)."""
    if isinstance(store, PostgresRunStore):
        _sql(store, "UPDATE {s}.stall_clock SET seen = 1 WHERE ns = %s", store._ns)
        return
    assert isinstance(store, RedisRunStore)
    store._redis.hset(stall_sweep_key(store._namespace), "seen", 1)


def held_as_going(store: RunStore, run_id: str) -> bool:
    """Whether the stall sweep still holds the run among the runs going (its index of them)."""
    if isinstance(store, PostgresRunStore):
        rows = _sql(
            store,
            "SELECT 1 FROM {s}.runs WHERE ns = %s AND run_id = %s AND stall_due IS NOT NULL",
            store._ns,
            run_id,
        )
        return bool(rows)
    assert isinstance(store, RedisRunStore)
    return store._redis.zscore(running_runs_key(store._namespace), run_id) is not None
