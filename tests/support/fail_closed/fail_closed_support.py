"""What the fail-closed suite's tests share: a ledger of what became of each delivery, a counter of
consumer restarts, raw publishing, and a PostgreSQL table that counts effects.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import dramatiq
import orjson
import pika
import psycopg

from pipelines import options as opt
from pipelines.app import App
from pipelines.broker import ExchangeBroker
from pipelines.handling.outcome import outcome_of
from tests.support.backends import AMQP_URL, POSTGRES_URL

#: Options in which a copy of a message carries what its actor did, for its delivery to record.
CARRIED = (opt.STEP_RESULT, opt.STEP_FAILURE, opt.KEY_DONE)


class Ledger(dramatiq.Middleware):
    """What became of each delivery, by message id: ran, dropped (acknowledged without running), put off;
    and which dropped deliveries were copies that carried an outcome to record (``carried``).

    Dead letters are read from RabbitMQ (they are what the broker published, not what a hook saw).
    """

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.deferred: Counter[str] = Counter()
        self.carried: Counter[str] = Counter()
        self._changed = threading.Condition()

    def _count(self, table: Counter[str], message: dramatiq.broker.MessageProxy) -> None:
        with self._changed:
            table[message.message_id.split(".")[0]] += 1
            self._changed.notify_all()

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        if exception is None and not message.failed:
            self._count(self.ran, message)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        if message.failed:
            return  # dead-lettered: counted from RabbitMQ
        deferred = getattr(outcome_of(message), "deferred", False)
        if not deferred and any(option in message.options for option in CARRIED):
            self._count(self.carried, message)
        self._count(self.deferred if deferred else self.dropped, message)

    def wait(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``done()`` holds (re-checked whenever a delivery ends, and every 0.2 s)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.2))
        return True


class ConsumerRestarts(logging.Handler):
    """Counts what Dramatiq logs when a consumer's ``__next__`` raised (every restart closes its channel),
    and when an ack or nack raised (Dramatiq calls that its own bug, and drops the settlement)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.restarts = 0
        self.unsettled = 0
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "Restarting consumer" in text:
            self.restarts += 1
        elif "Unhandled error during post_process_message" in text:
            self.unsettled += 1
            self.errors.append(text)
        elif record.levelno >= logging.CRITICAL:
            self.errors.append(text)


class RawPublisher:
    """Publishes bodies and headers as any producer could, straight into an actor's queue."""

    def __init__(self) -> None:
        self.connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def publish(self, queue: str, body: bytes, *, message_id: str, headers: dict[str, Any] | None = None) -> None:
        properties = pika.BasicProperties(message_id=message_id, headers=headers, delivery_mode=2)
        self.channel.basic_publish("", queue, body, properties)

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()


class Effects:
    """A PostgreSQL table of effects: with no unique constraint, a row per time an effect was applied;
    ``keyed``, the docs' table whose primary key is the effect key (a row per key, however often
    its effect was applied)."""

    def __init__(self, table: str, *, keyed: bool = False) -> None:
        self.table = table
        self._local = threading.local()
        self._opened: list[psycopg.Connection[Any]] = []
        key = "effect_key text PRIMARY KEY" if keyed else "effect_key text NOT NULL"
        with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
            connection.execute(f"CREATE TABLE {table} ({key}, at timestamptz DEFAULT now())")

    def _connection(self) -> psycopg.Connection[Any]:
        connection: psycopg.Connection[Any] | None = getattr(self._local, "connection", None)
        if connection is None or connection.closed:
            connection = self._local.connection = psycopg.connect(POSTGRES_URL, autocommit=True)
            self._opened.append(connection)
        return connection

    def apply(self, effect_key: str) -> None:
        """Apply an effect (a plain insert: applied twice, it shows twice)."""
        self._connection().execute(f"INSERT INTO {self.table} (effect_key) VALUES (%s)", (effect_key,))

    def apply_once(self, effect_key: str) -> None:
        """Apply an effect keyed by ``effect_key`` into a ``keyed`` table, as the docs show: a second
        application with the same key changes nothing (one with another key shows as a row more)."""
        self._connection().execute(
            f"INSERT INTO {self.table} (effect_key) VALUES (%s) ON CONFLICT (effect_key) DO NOTHING", (effect_key,)
        )

    def counts(self) -> Counter[str]:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
            rows = connection.execute(f"SELECT effect_key, count(*) FROM {self.table} GROUP BY effect_key").fetchall()
        return Counter({key: int(count) for key, count in rows})

    def drop(self) -> None:
        for connection in self._opened:
            connection.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
            connection.execute(f"DROP TABLE IF EXISTS {self.table}")


def body(marker: str, *, actor: str = "sink", options: dict[str, Any] | None = None, **fields: Any) -> bytes:
    """A Dramatiq message body for ``actor`` with ``options``, and any field replaced by ``fields``."""
    message = {
        "queue_name": "default",
        "actor_name": actor,
        "args": [marker],
        "kwargs": {},
        "options": options or {},
        "message_id": marker,
        "message_timestamp": 1,
    }
    return orjson.dumps({**message, **fields})


Headers = dict[str, Any] | None


#: The shapes that used to crash the consumer or run a message without its guards, kept as regression
#: cases: name → (body of a message with this marker, headers, what its dead letter must mention).
CORPUS: dict[str, tuple[Callable[[str], bytes], Headers, str]] = {
    "branches not a mapping": (
        lambda m: body(m, actor="", options={"pipeline_branches": "x"}),
        None,
        "pipeline_branches",
    ),
    "branch not a mapping": (
        lambda m: body(m, actor="", options={"pipeline_branches": {"sink": "x"}}),
        None,
        "pipeline_branches",
    ),
    "branch args not a list": (
        lambda m: body(m, actor="", options={"pipeline_branches": {"sink": {"args": 5}}}),
        None,
        "pipeline_branches",
    ),
    "delivery count not a number": (body, {"x-delivery-count": "abc"}, "x-delivery-count"),
    "delivery count void": (body, {"x-delivery-count": None}, "x-delivery-count"),
    "step not an address": (lambda m: body(m, options={"pipeline_step": "x"}), None, "pipeline_step"),
    "step without node": (lambda m: body(m, options={"pipeline_step": {"run": "r"}}), None, "pipeline_step"),
    "retries not a number": (lambda m: body(m, options={"retries": "x"}), None, "retries"),
    "max_retries not a number": (lambda m: body(m, options={"max_retries": "x"}), None, "max_retries"),
    "eta not a number": (lambda m: body(m, options={"eta": "soon"}), None, "eta"),
    "time_limit not a number": (lambda m: body(m, options={"time_limit": "x"}), None, "time_limit"),
    "idempotency key not a string": (lambda m: body(m, options={"idempotency_key": 5}), None, "idempotency_key"),
    "carried key not a string": (lambda m: body(m, options={"idempotency_done": 5}), None, "idempotency_done"),
    "max_age not a number": (lambda m: body(m, options={"max_age": "x"}), None, "max_age"),
    "on_success not an actor": (lambda m: body(m, options={"on_success": 5}), None, "on_success"),
    "pipe_target not a message": (lambda m: body(m, options={"pipe_target": "x"}), None, "pipe_target"),
    "scheduled_at not a time": (lambda m: body(m, options={"scheduled_at": "soon"}), None, "scheduled_at"),
    "throws from the wire": (lambda m: body(m, options={"throws": ["ValueError"]}), None, "throws"),
    "not JSON": (lambda m: b"\x80not json", None, "not JSON"),
    "a JSON list": (lambda m: b"[1, 2]", None, "list"),
    "args not a list": (lambda m: body(m, args="x"), None, "args"),
}


def declare_sink(app: App) -> Counter[str]:
    """Declare ``sink``, which counts its runs by the marker it is given."""
    runs: Counter[str] = Counter()
    lock = threading.Lock()

    @dramatiq.actor(broker=app.broker, actor_name="sink", max_retries=0)
    def sink(marker: str, *rest: Any, **extra: Any) -> None:
        with lock:
            runs[marker] += 1

    if isinstance(app.broker, ExchangeBroker):
        app.broker.ensure_topology()
    return runs


def dead_letters_by_id(app: App) -> Counter[str]:
    return Counter(letter.id.split(".")[0] for letter in app.dead_letters.list(limit=10_000))


def wait_until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``done`` every 0.1 s until it holds (for what has nothing to wait on, such as a queue's content)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)
