import sqlite3
import tempfile
from pathlib import Path

import dramatiq

import pipelines

app = pipelines.configure()
DATABASE = Path(tempfile.mkdtemp()) / "shop.db"


@dramatiq.actor(idempotency_key=lambda order_id, **_: f"charge-{order_id}")
def charge_payment(order_id: int, total: float) -> None:
    with sqlite3.connect(DATABASE) as db:  # payments (effect_key text PRIMARY KEY, order_id int, total real)
        db.execute(
            "INSERT INTO payments (effect_key, order_id, total) VALUES (?, ?, ?) ON CONFLICT (effect_key) DO NOTHING",
            (pipelines.current_effect_key(), order_id, total),
        )


if __name__ == "__main__":
    from pipelines.testing import running_worker

    with sqlite3.connect(DATABASE) as db:
        db.execute("CREATE TABLE payments (effect_key text PRIMARY KEY, order_id int, total real)")
    with running_worker(app):
        charge_payment.send(7, 19.5)
        app.broker.join(charge_payment.queue_name)
    with sqlite3.connect(DATABASE) as db:
        rows = db.execute("SELECT effect_key, total FROM payments").fetchall()
    assert rows == [("charge_payment:charge-7", 19.5)], rows  # the actor and its key
