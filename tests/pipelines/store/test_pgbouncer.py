"""The PostgreSQL store through PgBouncer in transaction mode: every server connection shared between
statements of many clients, so nothing may live on a session. With ``store.postgres_pooled`` psycopg
prepares nothing on the server, and waits and relays listen on ``store.postgres_listen_url``, directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dramatiq
import psycopg
import pytest

import pipelines
from pipelines import chain, chord, step
from tests.support.backends import POSTGRES_URL, Backend, on
from tests.support.fixtures import MakeApp, StartWorker
from tests.support.own_pgbouncer import OwnPgBouncer

TIMEOUT_S = 60
CHAINS = 60


@pytest.fixture(scope="module")
def bouncer(services: None) -> Iterator[OwnPgBouncer]:
    own = OwnPgBouncer(POSTGRES_URL)
    own.start()
    yield own
    own.close()


@on(Backend("rabbitmq", "postgres"))
def test_runs_chords_and_transactions_go_through_pgbouncer_in_transaction_mode(
    bouncer: OwnPgBouncer, make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app(store={"url": bouncer.url, "postgres_pooled": True, "postgres_listen_url": POSTGRES_URL})
    table = f"bounced_{app.settings.namespace.replace('-', '_')}"

    @dramatiq.actor(broker=app.broker)
    def add(x: int, y: int = 1) -> int:
        return x + y

    @dramatiq.actor(broker=app.broker)
    def total(values: list[int]) -> int:
        return sum(values)

    @dramatiq.actor(broker=app.broker)
    def record(x: int) -> int:
        with pipelines.transaction() as db:
            db.execute(f"INSERT INTO {table} (x) VALUES (%s)", [x])
        return x

    with psycopg.connect(bouncer.url, autocommit=True, prepare_threshold=None) as db:
        db.execute(f"CREATE TABLE {table} (x int NOT NULL)")
        try:
            start_worker(app, threads=8)
            chains = app.start_many([chain(step(add), step(add), step(add))] * CHAINS, args=(0,))
            gathered = app.start(chord([step(add, n) for n in range(20)], step(total)), args=(0,))
            with db.transaction():
                written = app.start(chain(step(record), step(add), step(record)), args=(5,), connection=db)
            assert [run.result(timeout_s=TIMEOUT_S) for run in chains] == [3] * CHAINS
            assert gathered.result(timeout_s=TIMEOUT_S) == sum(range(20))  # add(n, 0) each
            assert written.result(timeout_s=TIMEOUT_S) == 6
            found: list[Any] = db.execute(f"SELECT x FROM {table} ORDER BY x").fetchall()
            assert found == [(5,), (6,)]
        finally:
            db.execute(f"DROP TABLE IF EXISTS {table}")
