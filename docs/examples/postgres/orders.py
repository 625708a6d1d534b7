"""An order and the run that fulfils it, committed together; each step's write commits with the step.

Run with the PostgreSQL store: ``PIPELINES_STORE__URL=postgresql://... python orders.py``.
"""

import os

import dramatiq
import psycopg

import pipelines

app = pipelines.configure()  # store.url = "postgresql://..."
DATABASE = app.settings.store.url  # the application's tables live in the store's database
SHOP = os.environ.get("SHOP_SCHEMA", "shop")


@dramatiq.actor
def reserve_stock(order_id: int) -> int:
    with pipelines.transaction() as db:  # commits with this step's completion, or not at all
        db.execute(
            f"UPDATE {SHOP}.stock SET reserved = reserved + 1 WHERE sku = "
            f"(SELECT sku FROM {SHOP}.orders WHERE id = %s)",
            [order_id],
        )
    return order_id


@dramatiq.actor
def ship(order_id: int) -> str:
    with pipelines.transaction() as db:
        db.execute(f"UPDATE {SHOP}.orders SET state = 'shipped' WHERE id = %s", [order_id])
    return f"order {order_id} shipped"


fulfil = pipelines.chain(reserve_stock.message(), ship.message())


def place_order(db: psycopg.Connection, sku: str) -> pipelines.Run:
    """The order row and its run commit together: a rollback leaves neither."""
    with db.transaction():
        (order_id,) = db.execute(
            f"INSERT INTO {SHOP}.orders (sku, state) VALUES (%s, 'placed') RETURNING id", [sku]
        ).fetchone()
        return app.start(fulfil, args=(order_id,), connection=db)  # published once this commits


if __name__ == "__main__":
    from pipelines.testing import running_worker

    with psycopg.connect(DATABASE, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {SHOP}")
        db.execute(f"CREATE TABLE {SHOP}.orders (id serial PRIMARY KEY, sku text, state text)")
        db.execute(f"CREATE TABLE {SHOP}.stock (sku text PRIMARY KEY, reserved int)")
        db.execute(f"INSERT INTO {SHOP}.stock VALUES ('mug', 0)")
        try:
            with running_worker(app):
                run = place_order(db, "mug")
                assert run.result(timeout_s=30) == "order 1 shipped"
            assert db.execute(f"SELECT state FROM {SHOP}.orders").fetchall() == [("shipped",)]
            assert db.execute(f"SELECT reserved FROM {SHOP}.stock").fetchall() == [(1,)]
        finally:
            db.execute(f"DROP SCHEMA {SHOP} CASCADE")
