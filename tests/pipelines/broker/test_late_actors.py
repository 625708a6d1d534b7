"""Actors declared after a worker started: consumed when a worker reads their queue name, reported when none does."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import dramatiq
import pytest

from pipelines.app import App
from pipelines.broker import ExchangeBroker
from pipelines.testing import boot
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp, StartWorker
from tests.support.recording import TIMEOUT_S, Recorded


def test_an_actor_declared_after_the_worker_started_on_a_queue_name_it_consumes_is_processed(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app: App = make_app()
    dramatiq.actor(actor_name="early", broker=app.broker)(lambda: None)
    start_worker(app)
    seen = Recorded()
    late = dramatiq.actor(actor_name="late", broker=app.broker)(seen.add)

    for i in range(10):
        late.send(i)

    assert sorted(seen.wait_for(10)) == list(range(10))


def test_a_worker_started_before_any_actor_processes_actors_declared_later_on_new_queue_names(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app: App = make_app()
    start_worker(app)
    seen = Recorded()
    first = dramatiq.actor(actor_name="first", queue_name="images", broker=app.broker)(seen.add)
    second = dramatiq.actor(actor_name="second", queue_name="mail", broker=app.broker)(seen.add)

    first.send(1)
    second.send(2)

    assert sorted(seen.wait_for(2)) == [1, 2]


@only_on("rabbitmq")
def test_an_ordered_actor_declared_late_has_every_partition_consumed(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app: App = make_app()
    dramatiq.actor(actor_name="early", broker=app.broker)(lambda: None)
    start_worker(app)
    seen = Recorded()

    def by_key(key: int) -> None:
        seen.add(key)

    ordered = dramatiq.actor(
        actor_name="ordered", broker=app.broker, profile="ordered", partitions=3, ordering_key="key"
    )(by_key)

    for key in range(12):
        ordered.send(key)

    assert sorted(seen.wait_for(12)) == list(range(12))


@only_on("rabbitmq")
def test_an_actor_no_worker_of_the_process_will_consume_is_reported_when_declared(
    make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    app: App = make_app()
    dramatiq.actor(actor_name="early", broker=app.broker)(lambda: None)
    boot(app)
    worker = dramatiq.Worker(app.broker, worker_threads=1, worker_timeout=100, queues={"default"})
    worker.start()
    try:
        with caplog.at_level(logging.WARNING):
            dramatiq.actor(actor_name="consumed", broker=app.broker)(lambda: None)
            dramatiq.actor(actor_name="stranded", queue_name="reports", broker=app.broker)(lambda: None)
    finally:
        worker.stop()

    # The worker reads only "default": the framework's queue left out is said at its boot, apart.
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "is declared on queue" in r.getMessage()
    ]
    assert len(warnings) == 1
    assert "'stranded'" in warnings[0]
    assert "--queues reports" in warnings[0]


@only_on("rabbitmq")
def test_declaring_actors_with_no_worker_running_reports_nothing(
    make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    app: App = make_app()
    with caplog.at_level(logging.WARNING):
        dramatiq.actor(actor_name="anywhere", queue_name="reports", broker=app.broker)(lambda: None)

    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@only_on("rabbitmq")
def test_an_actor_queue_counts_the_consumers_reading_it(make_app: MakeApp, start_worker: StartWorker) -> None:
    app: App = make_app()
    broker = app.broker
    assert isinstance(broker, ExchangeBroker)
    dramatiq.actor(actor_name="unread", queue_name="reports", broker=broker)(lambda: None)
    broker.ensure_topology()
    queue = broker.topology.actor_queues["unread"]
    assert broker.queue_consumers(queue) == 0

    start_worker(app)

    deadline = time.monotonic() + TIMEOUT_S
    while broker.queue_consumers(queue) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert broker.queue_consumers(queue) == 1
    assert broker.queue_consumers(f"{queue}.nonexistent") is None


def await_consumers(broker: ExchangeBroker, queue: str, count: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while broker.queue_consumers(queue) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert broker.queue_consumers(queue) == count


@only_on("rabbitmq")
def test_a_long_running_actor_declared_late_is_consumed_only_once_a_thread_is_free_for_it(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app: App = make_app()
    broker = app.broker
    assert isinstance(broker, ExchangeBroker)
    seen = Recorded()
    release = threading.Event()

    def busy() -> None:
        seen.add("busy")
        release.wait(TIMEOUT_S)

    first = dramatiq.actor(actor_name="busy", broker=broker, profile="long_running", lease_s=5)(busy)
    start_worker(app, threads=1)
    try:
        first.send()
        seen.wait_for(1)
        # The only thread runs a long-running job: the window is full when the late actors are added.
        late = dramatiq.actor(actor_name="late_long", broker=broker, profile="long_running", lease_s=5)(
            lambda: seen.add("late_long")
        )
        # On the same queue name, so the same consumer takes up both.
        plain = dramatiq.actor(actor_name="late_plain", queue_name=late.queue_name, broker=broker)(
            lambda: seen.add("late_plain")
        )
        late.send()
        plain.send()
        topology = broker.topology
        # Both are taken up: the plain queue is consumed, the long-running one read by the worker, which
        # leaves its message in the queue while no thread is free for it.
        await_consumers(broker, topology.actor_queues["late_plain"], 1)
        await_consumers(broker, topology.actor_queues["late_long"], 1)
        assert broker.queue_depth(topology.actor_queues["late_long"]) == 1
    finally:
        release.set()

    assert sorted(seen.wait_for(3)) == ["busy", "late_long", "late_plain"]


#: A late actor's options, by where it lands.
LATE_ACTOR_OPTIONS: dict[str, dict[str, Any]] = {
    "consumed queue name": {},
    "new queue name": {"queue_name": "late_queue"},
    "long-running": {"profile": "long_running", "lease_s": 5},
}


@only_on("rabbitmq")
@pytest.mark.parametrize("where", list(LATE_ACTOR_OPTIONS))
def test_a_late_actor_is_read_by_the_running_worker_soon_after_its_declaration(
    make_app: MakeApp, start_worker: StartWorker, where: str
) -> None:
    app: App = make_app()
    broker = app.broker
    assert isinstance(broker, ExchangeBroker)
    dramatiq.actor(actor_name="early", broker=broker)(lambda: None)
    dramatiq.actor(actor_name="early_long", broker=broker, profile="long_running", lease_s=5)(lambda: None)
    start_worker(app)
    await_consumers(broker, broker.topology.actor_queues["early"], 1)
    await_consumers(broker, broker.topology.actor_queues["early_long"], 1)
    options = LATE_ACTOR_OPTIONS[where]
    seen = Recorded()

    declaring = time.monotonic()
    late = dramatiq.actor(actor_name="late", broker=broker, **options)(lambda: seen.add(time.monotonic()))
    await_consumers(broker, broker.topology.actor_queues["late"], 1)
    read = time.monotonic()
    late.send()
    sent = time.monotonic()
    [ran] = seen.wait_for(1)

    # Figures, not thresholds (timing belongs in bench/): printed for the record with -s.
    print(
        f"\nlate actor on a {where}: read by the worker {read - declaring:.3f} s after its declaration began; "
        f"sent in {sent - read:.3f} s, run {ran - sent:.3f} s after its send"
    )
