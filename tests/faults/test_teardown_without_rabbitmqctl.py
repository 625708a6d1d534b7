"""A broker in a container: no rabbitmqctl on this machine, but its management API (as docker compose's
broker has). A test namespace is deleted through the API, whatever declared it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import dramatiq
import pika
import pytest

from pipelines.app import build_app
from pipelines.broker import ExchangeBroker
from pipelines.config.settings import Settings
from tests.support.backends import REDIS_URL, TEST_DELAY_TIERS_S
from tests.support.faults.own_rabbit import OwnRabbit
from tests.support.housekeeping import delete_test_namespace, fresh_namespace, listed


@pytest.fixture
def node_with_management_api(no_rabbitmqctl: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnRabbit]:
    """A RabbitMQ node of the test's own with its management API, as docker compose's broker has."""
    if os.geteuid() != 0:
        pytest.fail("this test starts its own RabbitMQ node as the rabbitmq user: run it as root", pytrace=False)
    node = OwnRabbit(management=True)
    try:
        node.start()
        monkeypatch.setenv("PIPELINES_TEST_RABBITMQ_API", f"http://127.0.0.1:{node.management_port}")
        yield node
    finally:
        node.close()


def test_without_rabbitmqctl_a_test_namespace_is_deleted_through_the_management_api(
    node_with_management_api: OwnRabbit,
) -> None:
    node = node_with_management_api
    namespace, other = fresh_namespace(), fresh_namespace()
    # What a worker process declared in the namespace: the test knows none of its names.
    settings = {"broker": {"url": node.url, "delay_tiers_s": TEST_DELAY_TIERS_S}, "store": {"url": REDIS_URL}}
    app = build_app(Settings.from_values({"namespace": namespace, **settings}))
    dramatiq.actor(broker=app.broker, actor_name="resize")(lambda: None)
    assert isinstance(app.broker, ExchangeBroker)
    app.broker.ensure_topology()
    app.close()
    with pika.BlockingConnection(pika.URLParameters(node.url)) as connection:
        connection.channel().queue_declare(f"{other}.default.resize", durable=True)
    declared = [q for q in listed("list_queues", amqp_url=node.url) if q.startswith(f"{namespace}.")]

    delete_test_namespace(node.url, REDIS_URL, namespace)

    queues = node.ctl("list_queues", "name", "--no-table-headers").split()
    exchanges = node.ctl("list_exchanges", "name", "--no-table-headers").split()
    assert len(declared) == 2 * 2 + len(TEST_DELAY_TIERS_S)  # resize and the run-deadline check
    assert [q for q in queues if q.startswith(f"{namespace}.")] == []
    assert [e for e in exchanges if e.startswith(f"{namespace}.")] == []
    assert f"{other}.default.resize" in queues  # another namespace's queue stays
