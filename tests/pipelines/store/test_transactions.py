"""Runs started in the caller's transaction, and steps completed in the actor's (the PostgreSQL store).

A start inside a transaction is recorded with its first messages in the store's outbox: nothing runs
before the caller commits, a rollback leaves no run, and a worker's relay publishes what committed. An
actor's writes in ``pipelines.transaction()`` commit with its step's completion, or not at all.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import psycopg
import pytest

import pipelines
from pipelines import chain, step
from pipelines.app import App
from pipelines.errors import DefinitionError, RunFailed, RunNotFound
from pipelines.middleware.outbox_relay import OutboxRelay
from pipelines.store.postgres import PostgresRunStore
from pipelines.store.roles.transactions import OutboxRelaying
from tests.support.backends import POSTGRES_URL, Backend, on, schema_of
from tests.support.fixtures import MakeApp, Observe, StartWorker
from tests.support.housekeeping import fresh_namespace

TIMEOUT_S = 30
#: The PostgreSQL store guide's worked example.
EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "postgres" / "orders.py"

on_postgres = on(Backend("memory", "postgres"), Backend("rabbitmq", "postgres"))


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    """A connection of the application's own to the store's database (not autocommit, as psycopg makes it)."""
    with psycopg.connect(POSTGRES_URL) as connection:
        yield connection


@pytest.fixture
def orders(make_app: MakeApp) -> Iterator[str]:
    """A table of the application's own, with no unique constraint: a row written twice shows."""
    table = f"orders_{id(make_app)}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (order_id int NOT NULL, step text NOT NULL)")
    yield table
    with psycopg.connect(POSTGRES_URL, autocommit=True) as c:
        c.execute(f"DROP TABLE IF EXISTS {table}")


def rows(table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as c:
        return c.execute(f"SELECT order_id, step FROM {table} ORDER BY step, order_id").fetchall()


def relay(app: App) -> int:
    """What a worker's relay publishes now: the committed outbox entries."""
    assert isinstance(app.store, OutboxRelaying)
    return OutboxRelay(store=app.store).relay_once(app.broker)


def declare_shipping(app: App, table: str) -> dict[str, dramatiq.Actor[Any, Any]]:
    @dramatiq.actor(broker=app.broker)
    def reserve(order_id: int) -> int:
        with pipelines.transaction() as db:
            db.execute(f"INSERT INTO {table} (order_id, step) VALUES (%s, 'reserve')", [order_id])
        return order_id

    @dramatiq.actor(broker=app.broker)
    def ship(order_id: int) -> str:
        with pipelines.transaction() as db:
            db.execute(f"INSERT INTO {table} (order_id, step) VALUES (%s, 'ship')", [order_id])
        return f"shipped {order_id}"

    return {"reserve": reserve, "ship": ship}


@on_postgres
def test_a_start_committed_with_the_callers_writes_runs_once_it_commits(
    make_app: MakeApp, start_worker: StartWorker, conn: psycopg.Connection[Any], orders: str
) -> None:
    app = make_app()
    actors = declare_shipping(app, orders)
    with conn.transaction():
        conn.execute(f"INSERT INTO {orders} (order_id, step) VALUES (7, 'ordered')")
        run = app.start(chain(actors["reserve"].message(), actors["ship"].message()), args=(7,), connection=conn)
        # Not visible outside the transaction yet: no run to read, nothing to relay.
        with pytest.raises(RunNotFound):
            app.get_run(run.id).status()
        assert relay(app) == 0
    start_worker(app)
    assert run.result(timeout_s=TIMEOUT_S) == "shipped 7"
    assert rows(orders) == [(7, "ordered"), (7, "reserve"), (7, "ship")]


@on_postgres
def test_a_start_in_a_transaction_that_rolls_back_leaves_no_run_and_publishes_nothing(
    make_app: MakeApp, conn: psycopg.Connection[Any], orders: str
) -> None:
    app = make_app()
    actors = declare_shipping(app, orders)
    with conn.transaction():
        conn.execute(f"INSERT INTO {orders} (order_id, step) VALUES (8, 'ordered')")
        run = app.start(actors["ship"].message(), args=(8,), connection=conn)
        raise psycopg.Rollback  # the payment was declined
    assert relay(app) == 0
    with pytest.raises(RunNotFound):
        app.get_run(run.id).status()
    assert rows(orders) == []


@on_postgres
def test_a_start_on_an_autocommit_connection_outside_a_transaction_commits_at_once(
    make_app: MakeApp, start_worker: StartWorker, orders: str
) -> None:
    app = make_app()
    actors = declare_shipping(app, orders)
    with psycopg.connect(POSTGRES_URL, autocommit=True) as auto:
        run = app.start(actors["ship"].message(), args=(9,), connection=auto)
    assert app.get_run(run.id).status().state == "pending"
    start_worker(app)
    assert run.result(timeout_s=TIMEOUT_S) == "shipped 9"


@on_postgres
def test_a_keyed_start_in_a_transaction_starts_once(
    make_app: MakeApp, start_worker: StartWorker, conn: psycopg.Connection[Any], orders: str
) -> None:
    app = make_app()
    actors = declare_shipping(app, orders)
    with conn.transaction():
        first = app.start(actors["ship"].message(), args=(10,), idempotency_key="order-10", connection=conn)
    with conn.transaction():
        again = app.start(actors["ship"].message(), args=(10,), idempotency_key="order-10", connection=conn)
    assert (again.id, first.created, again.created) == (first.id, True, False)
    start_worker(app)
    assert first.result(timeout_s=TIMEOUT_S) == "shipped 10"
    assert rows(orders) == [(10, "ship")]


@on_postgres
def test_an_asyncio_start_in_a_transaction_runs_once_it_commits(
    make_app: MakeApp, start_worker: StartWorker, orders: str
) -> None:
    app = make_app()
    actors = declare_shipping(app, orders)
    start_worker(app)

    async def order() -> str:
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as aconn, aconn.transaction():
            await aconn.execute(f"INSERT INTO {orders} (order_id, step) VALUES (11, 'ordered')")
            run = await app.start_async(actors["ship"].message(), args=(11,), connection=aconn)
        return str(await run.result_async(timeout_s=TIMEOUT_S))

    assert asyncio.run(order()) == "shipped 11"
    assert rows(orders) == [(11, "ordered"), (11, "ship")]


@on_postgres
def test_an_actor_that_fails_after_writing_in_its_step_transaction_leaves_no_row(
    make_app: MakeApp, start_worker: StartWorker, orders: str
) -> None:
    app = make_app(retries={"max_retries": 2})
    tries: list[int] = []

    @dramatiq.actor(broker=app.broker)
    def flaky(order_id: int) -> int:
        with pipelines.transaction() as db:
            db.execute(f"INSERT INTO {orders} (order_id, step) VALUES (%s, 'flaky')", [order_id])
        tries.append(order_id)
        if len(tries) < 3:
            raise ConnectionError("the carrier did not answer")
        return order_id

    start_worker(app)
    run = app.start(step(flaky), args=(12,))
    assert run.result(timeout_s=TIMEOUT_S) == 12
    assert len(tries) == 3
    assert rows(orders) == [(12, "flaky")]  # the two failed attempts' rows rolled back


@on_postgres
def test_an_error_inside_the_block_undoes_only_the_blocks_writes(
    make_app: MakeApp, start_worker: StartWorker, orders: str
) -> None:
    app = make_app()

    @dramatiq.actor(broker=app.broker)
    def careful(order_id: int) -> int:
        with pipelines.transaction() as db:
            db.execute(f"INSERT INTO {orders} (order_id, step) VALUES (%s, 'kept')", [order_id])
        try:
            with pipelines.transaction() as db:
                db.execute(f"INSERT INTO {orders} (order_id, step) VALUES (%s, 'undone')", [order_id])
                db.execute("SELECT 1 / 0")
        except psycopg.errors.DivisionByZero:
            pass
        return order_id

    start_worker(app)
    assert app.start(step(careful), args=(13,)).result(timeout_s=TIMEOUT_S) == 13
    assert rows(orders) == [(13, "kept")]


@on_postgres
def test_a_step_transaction_outside_a_step_says_where_it_works(make_app: MakeApp) -> None:
    make_app()
    with pytest.raises(DefinitionError, match="inside a pipeline step"), pipelines.transaction():
        pass


@on_postgres
def test_connection_takes_only_a_psycopg_connection(make_app: MakeApp, orders: str) -> None:
    app = make_app()
    actors = declare_shipping(app, orders)
    with pytest.raises(DefinitionError, match="psycopg 3 connection"):
        app.start(actors["ship"].message(), args=(1,), connection=object())


@on(Backend("rabbitmq", "redis"))
def test_the_redis_store_says_a_start_in_a_transaction_needs_postgresql(
    make_app: MakeApp, start_worker: StartWorker, conn: psycopg.Connection[Any]
) -> None:
    app = make_app()

    @dramatiq.actor(broker=app.broker)
    def write() -> None:
        with pipelines.transaction():
            pass

    with pytest.raises(DefinitionError, match="needs the PostgreSQL run store"):
        app.start(write.message(), connection=conn)
    start_worker(app)
    with pytest.raises(RunFailed, match="needs the PostgreSQL run store"):
        app.start(write.message()).result(timeout_s=TIMEOUT_S)


def test_the_guides_order_example_commits_an_order_with_its_run(services: None, tmp_path: Path) -> None:
    namespace = fresh_namespace()
    schema = schema_of(namespace)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": "memory://",
        "PIPELINES_STORE__URL": POSTGRES_URL,
        "PIPELINES_STORE__POSTGRES_SCHEMA": schema,
        "SHOP_SCHEMA": f"shop_{schema}",
    }
    try:
        done = subprocess.run(
            [sys.executable, str(EXAMPLE)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert done.returncode == 0, f"{EXAMPLE.name} failed:\n{done.stdout}\n{done.stderr}"


@on(Backend("memory", "postgres"))
def test_an_outbox_entry_that_cannot_be_read_is_logged_and_left_out_not_retried_forever(
    make_app: MakeApp,
    start_worker: StartWorker,
    conn: psycopg.Connection[Any],
    orders: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    actors = declare_shipping(app, orders)
    assert isinstance(app.store, PostgresRunStore)
    with conn.transaction():
        run = app.start(actors["ship"].message(), args=(14,), connection=conn)
        conn.execute(
            f"INSERT INTO \"{app.store.schema}\".outbox (ns, run_id, messages, created_at) VALUES (%s, 'tampered', "
            "'not json', 0)",
            [app.settings.namespace],
        )
    assert relay(app) == 2  # both taken: the readable one published, the other logged
    assert "The outbox entry of run tampered cannot be published" in caplog.text
    assert relay(app) == 0
    start_worker(app)
    assert run.result(timeout_s=TIMEOUT_S) == "shipped 14"


@on(Backend("rabbitmq", "postgres"))
def test_a_step_whose_transaction_is_refused_at_commit_fails_its_run_with_one_dead_letter_and_writes_nothing(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, orders: str
) -> None:
    app = make_app()
    with psycopg.connect(POSTGRES_URL, autocommit=True) as c:  # checked at commit, not at the insert
        c.execute(f"ALTER TABLE {orders} ADD UNIQUE (order_id) DEFERRABLE INITIALLY DEFERRED")

    @dramatiq.actor(broker=app.broker)
    def twice(order_id: int) -> int:
        with pipelines.transaction() as db:
            db.execute(f"INSERT INTO {orders} (order_id, step) VALUES (%s, 'a'), (%s, 'b')", [order_id, order_id])
        return order_id

    observer = observe(app)
    start_worker(app)
    with pytest.raises(RunFailed, match="UniqueViolation"):
        app.start(step(twice), args=(15,)).result(timeout_s=TIMEOUT_S)
    observer.wait_dead_lettered("twice", 1)
    assert rows(orders) == []
    [dead] = app.dead_letters.list()
    assert (dead.reason.reason, dead.reason.error_type) == (
        "the step's transaction could not commit",
        "UniqueViolation",
    )
