"""Threads that publish at the same time share a connection and a confirm wait; what the shared attempt
does not settle (here: messages returned because their queue was deleted) each thread publishes alone,
and every message arrives once."""

from __future__ import annotations

import threading

import dramatiq
import pika

from pipelines.broker import ExchangeBroker
from tests.support.backends import only_on
from tests.support.broker_witness import PublishCounts, wait_for_ready
from tests.support.fixtures import MakeApp

THREADS = 8
ROUNDS = 5
ECHOES, LOST = 10, 2


@only_on("rabbitmq")
def test_concurrent_batches_arrive_once_each_even_when_some_of_them_are_returned(make_app: MakeApp) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    echo = dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    lost = dramatiq.actor(actor_name="lost", broker=app.broker)(lambda x: x)
    app.broker.ensure_topology()
    queues = app.broker.topology.actor_queues
    with pika.BlockingConnection(pika.URLParameters(app.settings.broker.url)) as connection:
        connection.channel().queue_delete(queues["lost"])  # its messages come back as unroutable
    together = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def publish(thread: int) -> None:
        try:
            for round_number in range(ROUNDS):
                together.wait(10)
                batch = [echo.message(thread * 100 + round_number) for _ in range(ECHOES)]
                app.broker.enqueue_many(batch + [lost.message(thread) for _ in range(LOST)])
        except BaseException as e:  # reported below, with the thread's own error
            failures.append(e)

    threads = [threading.Thread(target=publish, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert failures == []
    depth = app.broker.queue_depth
    assert (depth(queues["echo"]), depth(queues["lost"])) == (THREADS * ROUNDS * ECHOES, THREADS * ROUNDS * LOST)


@only_on("rabbitmq")
def test_a_batch_is_one_confirm_wait_and_fire_and_forget_messages_wait_for_none(
    make_app: MakeApp, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections)
    assert isinstance(app.broker, ExchangeBroker)
    echo = dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    quick = dramatiq.actor(actor_name="quick", broker=app.broker, profile="fire_and_forget")(lambda x: x)
    app.broker.ensure_topology()
    queues = [app.broker.topology.actor_queues[name] for name in ("echo", "quick")]
    published = publishes(app)  # as RabbitMQ counts them
    waits = app.broker.confirm_waits  # the publisher's own count: RabbitMQ does not see a client wait

    app.broker.enqueue_many([echo.message(n) for n in range(ECHOES)])
    app.broker.enqueue_many([quick.message(n) for n in range(ECHOES)])
    # The fire-and-forget ones are not confirmed: counted once their queue holds them (see broker_witness).
    held = wait_for_ready(app.settings.broker.url, dict.fromkeys(queues, ECHOES))

    assert app.broker.confirm_waits - waits == 1
    assert (published.count("work"), held) == (2 * ECHOES, dict.fromkeys(queues, ECHOES))
