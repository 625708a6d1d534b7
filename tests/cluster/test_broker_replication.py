"""Quorum queues on a three-node cluster: how many replicas ``[broker] quorum_initial_group_size``
gives them, RabbitMQ's own default when it is unset, and what changing it on existing queues does."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import pytest

from pipelines.app import App, build_app
from pipelines.broker import ExchangeBroker
from pipelines.config.settings import Settings
from pipelines.errors import TopologyMismatch
from tests.support.cluster.local_rabbit import RabbitCluster
from tests.support.housekeeping import fresh_namespace

pytestmark = pytest.mark.cluster

REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
def make_app(rabbit_cluster: RabbitCluster) -> Iterator[Callable[..., App]]:
    """Apps on the cluster's nodes with one actor; every namespace's queues deleted afterwards."""
    made: list[App] = []

    def make(namespace: str, **broker: Any) -> App:
        settings = Settings.from_values(
            {
                "namespace": namespace,
                "broker": {"urls": rabbit_cluster.urls, "delay_tiers_s": [1.0], **broker},
                "store": {"url": REDIS_URL},
            }
        )
        app = build_app(settings)
        dramatiq.actor(actor_name="charge", broker=app.broker)(lambda order_id: None)
        made.append(app)
        return app

    yield make
    for app in made:
        assert isinstance(app.broker, ExchangeBroker)
        app.broker.delete_topology()
        app.close()


def replicas(cluster: RabbitCluster, namespace: str) -> dict[str, int]:
    return {q["name"]: len(q["members"]) for q in cluster.quorum_queues() if q["name"].startswith(f"{namespace}.")}


def test_quorum_queues_get_the_configured_replicas_and_rabbitmqs_default_of_every_node_when_unset(
    rabbit_cluster: RabbitCluster, make_app: Callable[..., App]
) -> None:
    unset, two = (fresh_namespace() for _ in range(2))
    make_app(unset).broker.ensure_topology()  # type: ignore[union-attr]
    make_app(two, quorum_initial_group_size=2).broker.ensure_topology()  # type: ignore[union-attr]

    found = {namespace: replicas(rabbit_cluster, namespace) for namespace in (unset, two)}
    print(f"\nfigures: quorum queue members, unset: {set(found[unset].values())}, set to 2: {set(found[two].values())}")
    # The actor's queue and its dead letters, the deadline checks' queue and its dead letters, one delay tier.
    assert len(found[unset]) == len(found[two]) == 5
    assert set(found[unset].values()) == {3}
    assert set(found[two].values()) == {2}


def test_setting_a_replication_factor_on_existing_queues_is_a_topology_mismatch_that_says_what_to_do(
    rabbit_cluster: RabbitCluster, make_app: Callable[..., App]
) -> None:
    namespace = fresh_namespace()
    make_app(namespace).broker.ensure_topology()  # type: ignore[union-attr]
    changed = make_app(namespace, quorum_initial_group_size=3)
    with pytest.raises(TopologyMismatch, match="quorum_initial_group_size") as raised:
        changed.broker.ensure_topology()  # type: ignore[union-attr]
    assert "x-quorum-initial-group-size" in str(raised.value)
    assert set(replicas(rabbit_cluster, namespace).values()) == {3}
