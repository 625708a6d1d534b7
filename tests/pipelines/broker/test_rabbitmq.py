"""The RabbitMQ broker against the real server: what it declares, how it routes, what it refuses."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import time
from typing import Any

import dramatiq
import pika
import pytest

from pipelines import chain, step
from pipelines.app import App, build_app
from pipelines.broker import ExchangeBroker
from pipelines.config.settings import Settings
from pipelines.errors import BrokerUnavailable, MessageTooLarge, StoreUnavailable
from tests.support import housekeeping
from tests.support.backends import Backend, only_on
from tests.support.fixtures import MakeApp, Observe, StartWorker

pytestmark = only_on("rabbitmq")

TIMEOUT_S = 30


def rabbitmqctl(*args: str) -> Any:
    out = subprocess.run(
        [*housekeeping.rabbitmqctl(), "-q", "--formatter", "json", *args], check=True, capture_output=True
    )
    return json.loads(out.stdout)


def declare_two_actors(app: App) -> None:
    dramatiq.actor(actor_name="resize", queue_name="images", broker=app.broker)(lambda x: x)
    dramatiq.actor(actor_name="on_order", broker=app.broker, subscribe=["order.*", "refund.#"])(lambda e: None)


def test_startup_declares_exchanges_quorum_queues_and_bindings_and_redeclaring_changes_nothing(
    make_app: MakeApp,
) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    declare_two_actors(app)
    ns = app.settings.namespace

    app.broker.ensure_topology()
    app.broker.forget_declarations()
    app.broker.ensure_topology()  # a second declaration with the same arguments is accepted as is

    exchanges = {
        e["name"]: e["type"] for e in rabbitmqctl("list_exchanges", "name", "type") if e["name"].startswith(ns)
    }
    assert exchanges == {
        f"{ns}.work": "topic",
        f"{ns}.events": "topic",
        f"{ns}.dead": "direct",
        f"{ns}.delay": "headers",
    }

    queues = {
        q["name"]: {name: value for name, _, value in q["arguments"]}
        for q in rabbitmqctl("list_queues", "name", "arguments")
        if q["name"].startswith(ns)
    }
    resize = f"{ns}.images.resize"
    assert queues[resize] == {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": f"{ns}.dead",
        "x-dead-letter-routing-key": resize,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 20,
    }
    assert queues[f"{resize}.dead"] == {"x-queue-type": "quorum"}
    assert queues[f"{ns}.delay.1000ms"]["x-message-ttl"] == 1000
    assert queues[f"{ns}.delay.1000ms"]["x-dead-letter-exchange"] == f"{ns}.work"
    # Two actors, each with its dead-letter queue; the run deadline check (a system actor) and its own.
    assert len(queues) == 2 * 2 + 2 + len(app.settings.broker.delay_tiers_s)

    bindings = {
        (b["source_name"], b["destination_name"], b["routing_key"])
        for b in rabbitmqctl("list_bindings", "source_name", "destination_name", "routing_key")
        if b["source_name"].startswith(ns)
    }
    on_order = f"{ns}.default.on_order"
    assert {
        (f"{ns}.work", resize, "#.resize.#"),
        (f"{ns}.work", on_order, "#.on_order.#"),
        (f"{ns}.events", on_order, "order.*"),
        (f"{ns}.events", on_order, "refund.#"),
        (f"{ns}.dead", f"{resize}.dead", resize),
    } <= bindings


def test_a_queue_deleted_under_a_running_producer_is_declared_again_on_the_next_publish(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    observer = observe(app)
    dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    app.broker.ensure_topology()
    queue = app.broker.topology.actor_queues["echo"]
    with pika.BlockingConnection(pika.URLParameters(app.settings.broker.url)) as connection:
        connection.channel().queue_delete(queue)

    app.broker.enqueue(app.broker.get_actor("echo").message(1))
    start_worker(app)

    observer.wait_handled("echo", 1)


def wait_for_consumers(app: App, queue: str, count: int) -> None:
    """Block until ``count`` consumers read ``queue`` (it may be missing meanwhile)."""
    broker = app.broker
    assert isinstance(broker, ExchangeBroker)
    deadline = time.monotonic() + TIMEOUT_S
    while broker.queue_consumers(queue) != count:
        assert time.monotonic() < deadline, f"{queue} has {broker.queue_consumers(queue)} consumers"
        time.sleep(0.1)


def test_a_queue_deleted_under_a_running_worker_is_declared_again_and_consumed_with_its_siblings(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    echo = dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    sibling = dramatiq.actor(actor_name="sibling", broker=app.broker)(lambda x: x)  # on the same consumer
    start_worker(app)
    queue = app.broker.topology.actor_queues["echo"]
    wait_for_consumers(app, queue, 1)

    with pika.BlockingConnection(pika.URLParameters(app.settings.broker.url)) as connection:
        connection.channel().queue_delete(queue)  # RabbitMQ cancels the worker's consumer of it

    wait_for_consumers(app, queue, 1)  # declared again by the worker itself, not by a publish
    app.broker.enqueue(echo.message(1))
    app.broker.enqueue(sibling.message(2))
    observer.wait_handled("echo", 1)
    observer.wait_handled("sibling", 1)


def test_dramatiqs_connection_and_channel_of_a_thread_are_replaced_once_closed(make_app: MakeApp) -> None:
    app = make_app()
    broker = app.broker
    assert isinstance(broker, ExchangeBroker)
    dramatiq.actor(actor_name="echo", broker=broker)(lambda x: x)
    broker.ensure_topology()
    queue = broker.topology.actor_queues["echo"]

    broker.connection.close()  # as a connection lost under code that uses it
    assert broker.channel.queue_declare(queue, passive=True).method.message_count == 0
    broker.channel.close()
    assert broker.channel.queue_declare(queue, passive=True).method.message_count == 0
    assert broker.connection.is_open


def test_a_delayed_message_waits_in_the_delay_tiers_and_never_runs_early(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    ran_at: list[float] = []
    dramatiq.actor(actor_name="later", broker=app.broker)(lambda: ran_at.append(time.time()))
    start_worker(app)

    sent_at = time.time()
    app.broker.enqueue(app.broker.get_actor("later").message(), delay=1300)
    observer.wait_handled("later", 1)

    assert ran_at[0] - sent_at >= 1.3


def test_malformed_foreign_and_oversized_messages_are_dead_lettered_once_with_a_reason_and_valid_ones_still_run(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app(broker={"max_message_bytes": 4096})
    assert isinstance(app.broker, ExchangeBroker)
    observer = observe(app)
    dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    app.broker.ensure_topology()
    queue = app.broker.topology.actor_queues["echo"]
    valid = app.broker.get_actor("echo").message(1)
    bad_bodies = {
        "bad json": b"not json at all",
        "not an object": b"[1, 2, 3]",
        "missing fields": json.dumps({"actor_name": "echo"}).encode(),
        "wrong types": json.dumps({**valid.asdict(), "args": "oops"}).encode(),
        "a pickle": pickle.dumps({"actor_name": "echo"}),
        "unknown actor": json.dumps({**valid.asdict(), "actor_name": "someone_else"}).encode(),
        "oversized": json.dumps({**valid.asdict(), "args": ["x" * 10_000]}).encode(),
    }
    with pika.BlockingConnection(pika.URLParameters(app.settings.broker.url)) as connection:
        channel = connection.channel()
        for name, body in bad_bodies.items():
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, message_id=name))
    app.broker.enqueue(app.broker.get_actor("echo").message(2))
    start_worker(app)

    observer.wait_handled("echo", 1)
    deadline = time.monotonic() + 30
    while len(app.dead_letters.list("echo")) < len(bad_bodies) and time.monotonic() < deadline:
        time.sleep(0.1)  # the dead-letter queue is read, not subscribed to
    letters = app.dead_letters.list("echo")
    reasons = {letter.id: letter.reason for letter in letters}

    assert observer.handled == {"echo": 1}
    assert sorted(letter.id for letter in letters) == sorted(bad_bodies)  # each dead-lettered once
    assert reasons["oversized"].reason == "message too large"
    assert {r.reason for name, r in reasons.items() if name != "oversized"} == {"malformed message"}
    assert "not JSON" in (reasons["bad json"].error or "")
    assert "lacks the field(s)" in (reasons["missing fields"].error or "")
    assert "field args is str, expected list" in (reasons["wrong types"].error or "")
    assert "arrived on the queue of 'echo'" in (reasons["unknown actor"].error or "")
    assert all(r.queue == queue and r.actor == "echo" for r in reasons.values())


def test_a_message_over_the_size_limit_is_refused_before_publishing(make_app: MakeApp) -> None:
    app = make_app(broker={"max_message_bytes": 2000})
    dramatiq.actor(actor_name="store_blob", broker=app.broker)(lambda blob: None)

    with pytest.raises(MessageTooLarge, match=r"for 'store_blob' is \d+ bytes, over broker.max_message_bytes = 2000"):
        app.start(chain(step(app.broker.get_actor("store_blob"), "x" * 5000)))


def test_an_unreachable_rabbitmq_or_redis_gives_an_error_naming_it_with_the_password_masked(backend: Backend) -> None:
    down = Settings.model_validate(
        {
            "namespace": "unreachable",
            "broker": {"url": "amqp://guest:s3cret@127.0.0.1:1/%2F", "connection_attempts": 1},
            "store": {"url": "redis://:s3cret@127.0.0.1:1/0"},
        }
    )
    app = build_app(down)
    dramatiq.actor(actor_name="noop", broker=app.broker)(lambda: None)

    with pytest.raises(StoreUnavailable, match=r"Redis at redis://:\*\*\*@127.0.0.1:1/0 does not answer") as store:
        app.start(chain(app.broker.get_actor("noop")))
    with pytest.raises(
        BrokerUnavailable, match=r"RabbitMQ at amqp://guest:\*\*\*@127.0.0.1:1/%2F does not answer"
    ) as rmq:
        app.broker.enqueue(app.broker.get_actor("noop").message())
    assert "s3cret" not in str(store.value) + str(rmq.value)


def test_a_redis_database_the_server_does_not_have_is_named_not_a_traceback(backend: Backend) -> None:
    settings = Settings.model_validate({"namespace": "nodb", "store": {"url": "redis://127.0.0.1:6379/999"}})
    store = build_app(settings).store

    with pytest.raises(StoreUnavailable, match=r"Redis at redis://127.0.0.1:6379/999 has no database 999"):
        store.get_run("any")


def test_an_amqps_url_turns_on_tls(backend: Backend) -> None:
    settings = Settings.model_validate(
        {"namespace": "tls", "broker": {"url": "amqps://user:pw@rabbit.example:5671/%2F"}}
    )
    broker: Any = build_app(settings).broker

    (parameters,) = broker.parameters
    assert parameters.ssl_options is not None
    assert (parameters.host, parameters.port) == ("rabbit.example", 5671)


def test_with_several_node_urls_a_node_that_does_not_answer_is_passed_over(
    make_app: MakeApp, start_worker: StartWorker, backend: Backend
) -> None:
    down = "amqp://guest:s3cret@127.0.0.1:1/%2F"
    live = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
    app = make_app(broker={"url": f"{down},{live}", "connection_attempts": 1})
    done: list[int] = []
    dramatiq.actor(actor_name="record", broker=app.broker)(done.append)
    start_worker(app)
    for n in range(20):  # each thread's connection starts at a node picked at random
        app.broker.get_actor("record").send(n)
    deadline = time.monotonic() + TIMEOUT_S
    while sorted(done) != list(range(20)):
        assert time.monotonic() < deadline, f"ran {sorted(done)}"
        time.sleep(0.05)


def test_when_no_node_answers_the_error_names_every_node_with_its_password_masked(backend: Backend) -> None:
    nodes = [f"amqp://guest:s3cret@127.0.0.1:{port}/%2F" for port in (1, 2)]
    app = build_app(
        Settings.model_validate(
            {
                "namespace": "unreachable",
                "broker": {"urls": nodes, "connection_attempts": 1},
                "store": {"url": "memory://"},
            }
        )
    )
    dramatiq.actor(actor_name="noop", broker=app.broker)(lambda: None)
    with pytest.raises(BrokerUnavailable) as raised:
        app.broker.enqueue(app.broker.get_actor("noop").message())
    masked = "amqp://guest:***@127.0.0.1:1/%2F, amqp://guest:***@127.0.0.1:2/%2F"
    assert f"No node of RabbitMQ at {masked} answers" in str(raised.value)
    assert "s3cret" not in str(raised.value)
