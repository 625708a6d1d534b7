"""What the broker itself says about a test's namespace: the witness a test trusts over the framework's
own counts.

RabbitMQ, read with its own tools:

- **Publishes.** Its firehose tracer copies every publish into a virtual host to the ``amq.rabbitmq.trace``
  exchange, naming the exchange it was published to (its routing keys and the queues it reached too).
  A test that counts publishes works in a virtual host of the run's own with the tracer on (the
  ``traced_vhost`` fixture), so that no other client's publishes are seen, or slowed. RabbitMQ traces a
  publish before it routes it, so once a test has seen a publish's copies arrive, its trace is there too.
- **Messages held.** A queue's ready messages from a passive declare, which a quorum queue answers from its
  current state (``rabbitmqctl list_queues`` reports a quorum queue's figures as of its last tick, up to
  5 s old); the unacknowledged ones from the channels that consume the namespace's queues
  (``rabbitmqctl list_consumers`` and ``list_channels``, both read from the live processes).

The embedded broker is its own witness: it counts the publishes it routes.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import pika

from pipelines.app import App
from pipelines.broker import ExchangeBroker, MemoryBroker
from tests.support.housekeeping import rabbitmqctl

#: The exchange RabbitMQ's firehose tracer publishes to, in each virtual host.
TRACE_EXCHANGE = "amq.rabbitmq.trace"


def rabbitmqctl_json(*args: str) -> list[dict[str, Any]]:
    """The rows ``rabbitmqctl <args>`` prints, read as JSON."""
    out = subprocess.run(
        [*rabbitmqctl(), "-q", "--formatter", "json", *args], check=True, capture_output=True, timeout=120
    )
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def vhost_of(amqp_url: str) -> str:
    """The virtual host an AMQP URL names (``/`` when it names none)."""
    path = urlsplit(amqp_url).path
    return unquote(path[1:]) if len(path) > 1 else "/"


class Firehose:
    """The publishes into one namespace's exchanges, from RabbitMQ's firehose tracer (on in the URL's
    virtual host); its queue is the connection's own, deleted when :meth:`close` closes it."""

    def __init__(self, amqp_url: str, namespace: str) -> None:
        self.namespace = namespace
        self._connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        self._channel = self._connection.channel()
        self._queue = self._channel.queue_declare("", exclusive=True).method.queue
        self._channel.queue_bind(self._queue, TRACE_EXCHANGE, f"publish.{namespace}.*")
        self._seen: list[str] = []
        """The exchange of each publish traced so far."""

    def publishes(self, exchange: str) -> int:
        """The publishes into ``<namespace>.<exchange>`` traced so far."""
        while True:
            method, properties, _ = self._channel.basic_get(self._queue, auto_ack=True)
            if method is None:
                break
            self._seen.append(str(properties.headers["exchange_name"]))
        return self._seen.count(f"{self.namespace}.{exchange}")

    def close(self) -> None:
        self._connection.close()


class Publishes:
    """The publishes the app's broker made into one of its namespace's exchanges, as the broker counts
    them: RabbitMQ's tracer (the app must be made with :attr:`sections`), or the embedded broker itself.
    Count after the test has seen the publishes' effects (see the module docstring)."""

    def __init__(self, app: App, traced_url: str | None) -> None:
        self._app = app
        self._firehose: Firehose | None = None
        self._start = 0
        if isinstance(app.broker, ExchangeBroker):
            if traced_url is None or app.settings.broker.url != traced_url:
                raise AssertionError("make the app with the publishes fixture's sections: only its vhost is traced")
            self._firehose = Firehose(traced_url, app.settings.namespace)
        else:
            assert isinstance(app.broker, MemoryBroker)
            self._start = app.broker.publish_count

    def count(self, exchange: str) -> int:
        """Publishes into ``<namespace>.<exchange>`` since this count began (the embedded broker tells
        no exchanges apart: its publishes since then, into any)."""
        if self._firehose is not None:
            return self._firehose.publishes(exchange)
        assert isinstance(self._app.broker, MemoryBroker)
        return self._app.broker.publish_count - self._start

    def close(self) -> None:
        if self._firehose is not None:
            self._firehose.close()


class PublishCounts:
    """The ``publishes`` fixture: ``publishes(app)`` starts counting the app's publishes; :attr:`sections`
    make an app on RabbitMQ in the traced virtual host (``traced_url``; None on the embedded broker)."""

    def __init__(self, traced_url: str | None) -> None:
        self.traced_url = traced_url
        self._counts: list[Publishes] = []

    @property
    def sections(self) -> dict[str, Any]:
        return {"broker": {"url": self.traced_url}} if self.traced_url is not None else {}

    def __call__(self, app: App) -> Publishes:
        counts = Publishes(app, self.traced_url)
        self._counts.append(counts)
        return counts

    def close(self) -> None:
        for counts in self._counts:
            counts.close()


def ready(amqp_url: str, queues: Iterable[str]) -> dict[str, int]:
    """Each queue's ready messages, from a passive declare (a quorum queue's current count)."""
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as connection:
        channel = connection.channel()
        return {queue: int(channel.queue_declare(queue, passive=True).method.message_count) for queue in queues}


def wait_for_ready(amqp_url: str, at_least: Mapping[str, int], timeout_s: float = 30) -> dict[str, int]:
    """Each queue's ready messages, once each holds at least ``at_least[queue]`` (polling: RabbitMQ has
    nothing to subscribe to); fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = ready(amqp_url, at_least)
        if all(counts[queue] >= count for queue, count in at_least.items()):
            return counts
        assert time.monotonic() < deadline, f"queues never held {dict(at_least)}: {counts}"
        time.sleep(0.05)


def unacknowledged(amqp_url: str, namespace: str) -> int:
    """Messages delivered and not acknowledged yet on the channels that consume the namespace's queues
    (the same channels listed before and after their counts, or read again)."""
    vhost = vhost_of(amqp_url)

    def consuming() -> set[str]:
        rows = rabbitmqctl_json("list_consumers", "-p", vhost, "queue_name", "channel_pid")
        return {str(row["channel_pid"]) for row in rows if str(row["queue_name"]).startswith(f"{namespace}.")}

    channels = consuming()
    while True:
        counts = {
            str(row["pid"]): int(row["messages_unacknowledged"])
            for row in rabbitmqctl_json("list_channels", "pid", "messages_unacknowledged")
        }
        after = consuming()
        if after == channels:
            return sum(counts.get(channel, 0) for channel in channels)
        channels = after


def wait_until_empty(amqp_url: str, namespace: str, queues: Iterable[str], timeout_s: float = 30) -> None:
    """Return once RabbitMQ holds nothing of the namespace: no message ready in ``queues`` and none
    delivered unacknowledged to its consumers (whatever it holds may be delivered again: a delivery left
    unacknowledged past the consumer timeout is); polling, fails after ``timeout_s``."""
    names = list(queues)
    deadline = time.monotonic() + timeout_s
    while True:
        held = {queue: count for queue, count in ready(amqp_url, names).items() if count}
        pending = unacknowledged(amqp_url, namespace)
        if not held and not pending:
            return
        assert time.monotonic() < deadline, (
            f"RabbitMQ still holds {held or 'no ready message'}, {pending} unacknowledged"
        )
        time.sleep(0.1)
