"""The module `dramatiq` starts in the stall test: the app from PIPELINES_*, and one chain step that
writes its effect to PostgreSQL, keyed by the effect key (a primary key), and every execution to a second table."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import dramatiq
import psycopg

import pipelines
from pipelines.app import configure

app = configure()
TABLE = os.environ["FC_EFFECTS_TABLE"]
POSTGRES_URL = os.environ["FC_POSTGRES_URL"]
WORK_S = float(os.environ.get("FC_WORK_S", "0.3"))
_local = threading.local()


def _connection() -> psycopg.Connection[Any]:
    connection: psycopg.Connection[Any] | None = getattr(_local, "connection", None)
    if connection is None:
        connection = _local.connection = psycopg.connect(POSTGRES_URL, autocommit=True)
    return connection


@dramatiq.actor(broker=app.broker, max_retries=10, min_backoff=50, max_backoff=500)
def ledger_step(tag: str, value: int) -> int:
    time.sleep(WORK_S)
    connection = _connection()
    try:
        connection.execute(f"INSERT INTO {TABLE}_runs (effect_key) VALUES (%s)", (f"{tag}:{value}",))
        key = pipelines.current_effect_key()
        connection.execute(  # keyed: applied once per effect key, as the docs show
            f"INSERT INTO {TABLE} (effect_key) VALUES (%s) ON CONFLICT (effect_key) DO NOTHING", (key,)
        )
    except BaseException:
        # A time limit that interrupts a query leaves the connection mid-command: the retry opens another.
        _local.connection = None
        connection.close()
        raise
    return value + 1


@dramatiq.actor(broker=app.broker, idempotency_key=lambda order_id: f"charge-{order_id}", max_retries=10)
def charge(order_id: int) -> None:
    """A keyed effect: the body runs once per key, each run written to the table (no unique key)."""
    time.sleep(WORK_S)
    _connection().execute(f"INSERT INTO {TABLE} (effect_key) VALUES (%s)", (f"charge-{order_id}",))
