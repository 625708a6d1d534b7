"""An actor for the fault suite whose effect is a row in the application's own table, written in its step's
transaction (``pipelines.transaction()``), and the table, which has no unique constraint: a row written
twice shows as two."""

from __future__ import annotations

import os
import time
from typing import Any

import dramatiq
import psycopg

import pipelines
from tests.support.faults.fault_actors import WORK_S, Ledger

#: The environment variable that names the effects table to the worker processes.
TABLE_VARIABLE = "FAULT_EFFECTS_TABLE"


def create_table(url: str, table: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (item text NOT NULL, step integer NOT NULL)")


def drop_table(url: str, table: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def rows_by_step(url: str, table: str) -> dict[tuple[str, int], int]:
    """How many rows each (item, step) has."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(f"SELECT item, step, count(*) FROM {table} GROUP BY item, step").fetchall()
    return {(item, step): count for item, step, count in found}


def declare(broker: Any, namespace: str, table: str) -> dict[str, dramatiq.Actor[Any, Any]]:
    """Declare ``record`` on ``broker``: each call inserts one row into ``table``."""
    ledger = Ledger(namespace)

    @dramatiq.actor(broker=broker, max_retries=5, min_backoff=50)
    def record(item: str, step: int) -> int:
        ledger.executed("record", f"{item}:{step}")
        with pipelines.transaction() as db:
            db.execute(f"INSERT INTO {table} (item, step) VALUES (%s, %s)", [item, step])
            time.sleep(WORK_S)  # a kill lands between the write and the completion now and then
        return step + 1

    return {"record": record}


def declared_here(broker: Any, namespace: str) -> dict[str, dramatiq.Actor[Any, Any]]:
    """:func:`declare` with the table the environment names (in a worker process)."""
    return declare(broker, namespace, os.environ[TABLE_VARIABLE])
