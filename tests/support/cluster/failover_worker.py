"""The module `dramatiq` starts in the broker failover tests: the app from PIPELINES_* (its broker on the
local cluster's three nodes), and actors that write every execution to ``<table>_runs`` and their
effect, keyed by the effect key, to ``<table>`` (PostgreSQL, no unique constraint)."""

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
TABLE = os.environ["CL_EFFECTS_TABLE"]
POSTGRES_URL = os.environ["CL_POSTGRES_URL"]
WORK_S = float(os.environ.get("CL_WORK_S", "0.02"))
_local = threading.local()


def _apply() -> None:
    """Record this execution, then apply its effect once per effect key."""
    time.sleep(WORK_S)
    key = pipelines.current_effect_key()
    connection: psycopg.Connection[Any] | None = getattr(_local, "connection", None)
    if connection is None:
        connection = _local.connection = psycopg.connect(POSTGRES_URL, autocommit=True)
    try:
        connection.execute(f"INSERT INTO {TABLE}_runs (effect_key) VALUES (%s)", (key,))
        connection.execute(  # keyed: applied once per effect key, as the docs show
            f"INSERT INTO {TABLE} (effect_key) SELECT %s"
            f" WHERE NOT EXISTS (SELECT 1 FROM {TABLE} WHERE effect_key = %s)",
            (key, key),
        )
    except BaseException:
        _local.connection = None
        connection.close()
        raise


@dramatiq.actor(broker=app.broker, max_retries=20, min_backoff=100, max_backoff=1000, idempotency_key=lambda n: f"k{n}")
def keyed_effect(n: int) -> None:
    _apply()


@dramatiq.actor(broker=app.broker, max_retries=20, min_backoff=100, max_backoff=1000)
def chain_step(tag: str, value: int) -> int:
    _apply()
    return value + 1


@dramatiq.actor(broker=app.broker, max_retries=20, min_backoff=100, max_backoff=1000)
def chord_member(n: int) -> int:
    _apply()
    return n


@dramatiq.actor(broker=app.broker, max_retries=20, min_backoff=100, max_backoff=1000)
def chord_total(tag: str, values: list[int]) -> int:
    _apply()
    return sum(values)
