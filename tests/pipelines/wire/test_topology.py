"""What a namespace declares in RabbitMQ: exchanges, queues with their arguments, bindings, delay tiers."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, Literal

import dramatiq
import pytest
from periodiq import cron

from pipelines.broker import ExchangeBroker
from pipelines.flow.deadlines import DEADLINE_CHECK
from pipelines.middleware.leases import WATCHDOG
from pipelines.middleware.schedules import CHECK
from pipelines.wire.topology import DELAY_TIER_HEADER, ActorRoute, Binding, Exchange, Queue, Topology, build_topology
from tests.support.backends import AMQP_URL, TEST_DELAY_TIERS_S, only_on
from tests.support.fixtures import MakeApp
from tests.support.housekeeping import listed

CHARGE = ActorRoute("charge", "default")
AUDIT = ActorRoute("audit", "events", ("order.*", "invoice.#"))
RESIZE = ActorRoute("resize", "images")
QUORUM_ONLY = {"x-delivery-limit", "x-dead-letter-strategy", "x-overflow"}


def build(
    actors: Iterable[ActorRoute] = (CHARGE, AUDIT, RESIZE),
    *,
    queue_type: Literal["quorum", "classic"] = "quorum",
    delivery_limit: int = 20,
    tiers: Iterable[int] = (100, 1000, 5000),
) -> Topology:
    return build_topology("ns", actors, queue_type=queue_type, delivery_limit=delivery_limit, delay_tiers_ms=tiers)


def queue_named(topology: Topology, name: str) -> Queue:
    (queue,) = [q for q in topology.queues if q.name == name]
    return queue


def test_declares_the_four_exchanges_with_their_types() -> None:
    topology = build()
    assert topology.exchanges == (
        Exchange("ns.work", "topic"),
        Exchange("ns.events", "topic"),
        Exchange("ns.dead", "direct"),
        Exchange("ns.delay", "headers"),
    )
    assert (topology.work_exchange, topology.events_exchange, topology.delay_exchange) == (
        "ns.work",
        "ns.events",
        "ns.delay",
    )


def test_each_actor_gets_a_queue_named_by_namespace_queue_name_and_actor() -> None:
    topology = build()
    assert topology.actor_queues == {
        "audit": "ns.events.audit",
        "charge": "ns.default.charge",
        "resize": "ns.images.resize",
    }
    # Queues come in actor-name order, whatever their queue names.
    assert [q.name for q in topology.queues if q.role == "actor"] == [
        "ns.events.audit",
        "ns.default.charge",
        "ns.images.resize",
    ]


def test_a_quorum_actor_queue_dead_letters_at_least_once_after_the_delivery_limit() -> None:
    queue = queue_named(build(delivery_limit=7), "ns.default.charge")
    assert queue.role == "actor"
    assert queue.arguments == {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": "ns.dead",
        "x-dead-letter-routing-key": "ns.default.charge",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 7,
    }


@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
def test_each_actor_queue_has_a_dead_letter_queue_without_ttl(queue_type: Literal["quorum", "classic"]) -> None:
    queue = queue_named(build(queue_type=queue_type), "ns.default.charge.dead")
    assert queue.role == "dead-letter"
    assert queue.arguments == {"x-queue-type": queue_type}
    assert "x-message-ttl" not in queue.arguments


def test_classic_queues_get_no_quorum_only_arguments() -> None:
    topology = build(queue_type="classic")
    for queue in topology.queues:
        assert queue.arguments["x-queue-type"] == "classic"
        assert QUORUM_ONLY.isdisjoint(queue.arguments), queue
    assert queue_named(topology, "ns.default.charge").arguments == {
        "x-queue-type": "classic",
        "x-dead-letter-exchange": "ns.dead",
        "x-dead-letter-routing-key": "ns.default.charge",
    }


def test_an_actor_queue_is_bound_to_the_work_exchange_by_its_name_anywhere_in_the_key() -> None:
    bindings = build().bindings
    work = [b for b in bindings if b.exchange == "ns.work"]
    assert work == [
        Binding("ns.work", "ns.events.audit", "#.audit.#"),
        Binding("ns.work", "ns.default.charge", "#.charge.#"),
        Binding("ns.work", "ns.images.resize", "#.resize.#"),
    ]


def test_each_subscription_pattern_is_one_binding_to_the_events_exchange() -> None:
    events = [b for b in build().bindings if b.exchange == "ns.events"]
    assert events == [
        Binding("ns.events", "ns.events.audit", "order.*"),
        Binding("ns.events", "ns.events.audit", "invoice.#"),
    ]


def test_a_dead_letter_queue_is_bound_by_its_actor_queue_name() -> None:
    topology = build()
    dead = [b for b in topology.bindings if b.exchange == "ns.dead"]
    assert dead == [
        Binding("ns.dead", "ns.events.audit.dead", "ns.events.audit"),
        Binding("ns.dead", "ns.default.charge.dead", "ns.default.charge"),
        Binding("ns.dead", "ns.images.resize.dead", "ns.images.resize"),
    ]


def test_a_rejected_message_reaches_the_dead_letter_queue_of_its_own_queue() -> None:
    topology = build()
    for queue in topology.actor_queues.values():
        arguments = queue_named(topology, queue).arguments
        exchange, key = arguments["x-dead-letter-exchange"], arguments["x-dead-letter-routing-key"]
        targets = [b.queue for b in topology.bindings if b.exchange == exchange and b.routing_key == key]
        assert targets == [f"{queue}.dead"]


@pytest.mark.parametrize("tier", [100, 1000, 5000])
def test_a_delay_tier_is_a_queue_whose_messages_expire_back_into_the_work_exchange(tier: int) -> None:
    queue = queue_named(build(), f"ns.delay.{tier}ms")
    assert queue.role == "delay"
    assert queue.arguments == {
        "x-queue-type": "quorum",
        "x-message-ttl": tier,
        "x-dead-letter-exchange": "ns.work",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }
    # No x-dead-letter-routing-key: an expired message keeps its own routing key.
    assert "x-dead-letter-routing-key" not in queue.arguments


def test_a_classic_delay_tier_only_expires_into_the_work_exchange() -> None:
    queue = queue_named(build(queue_type="classic"), "ns.delay.100ms")
    assert queue.arguments == {"x-queue-type": "classic", "x-message-ttl": 100, "x-dead-letter-exchange": "ns.work"}


def test_delay_queues_are_bound_to_the_headers_exchange_by_their_tier_header() -> None:
    delay = [b for b in build().bindings if b.exchange == "ns.delay"]
    assert delay == [
        Binding("ns.delay", f"ns.delay.{tier}ms", "", {"x-match": "all", DELAY_TIER_HEADER: tier})
        for tier in (100, 1000, 5000)
    ]


def test_delay_tiers_are_sorted_and_deduplicated() -> None:
    topology = build(tiers=[5000, 100, 1000, 100])
    assert topology.delay_tiers_ms == (100, 1000, 5000)
    assert [q.name for q in topology.queues if q.role == "delay"] == [
        "ns.delay.100ms",
        "ns.delay.1000ms",
        "ns.delay.5000ms",
    ]


@pytest.mark.parametrize(
    ("remaining_ms", "tier"),
    [
        (-5, 100),
        (0, 100),
        (99, 100),
        (100, 100),
        (899, 100),
        (900, 1000),  # overshooting by at most the shortest tier ends the wait in one hop
        (999, 1000),
        (1000, 1000),
        (4899, 1000),
        (4900, 5000),
        (5000, 5000),
        (10**9, 5000),
    ],
)
def test_delay_tier_for_never_fires_early_and_is_late_by_at_most_the_shortest_tier(
    remaining_ms: int, tier: int
) -> None:
    assert build().delay_tier_for(remaining_ms) == tier


def test_an_actor_without_subscriptions_has_no_events_binding() -> None:
    topology = build([CHARGE])
    assert [b for b in topology.bindings if b.exchange == "ns.events"] == []


def test_every_queue_and_binding_stays_inside_the_namespace() -> None:
    topology = build()
    exchanges = {e.name for e in topology.exchanges}
    assert all(q.name.startswith("ns.") for q in topology.queues)
    assert all(b.exchange in exchanges for b in topology.bindings)
    assert {b.queue for b in topology.bindings} <= {q.name for q in topology.queues}


def test_the_topology_does_not_depend_on_the_order_of_actors() -> None:
    expected = build()
    for order in itertools.permutations((CHARGE, AUDIT, RESIZE)):
        assert build(order, tiers=(5000, 100, 1000)) == expected


def test_no_actors_still_declares_exchanges_and_delay_tiers() -> None:
    topology = build([])
    assert len(topology.exchanges) == 4
    assert [q.role for q in topology.queues] == ["delay", "delay", "delay"]
    assert topology.actor_queues == {}


def test_a_replication_factor_is_given_to_every_quorum_queue_only_when_set() -> None:
    ordered = ActorRoute("ledger", "default", profile="ordered", partitions=2)
    fast = ActorRoute("ping", "default", profile="fire_and_forget")
    actors = (CHARGE, ordered, fast)
    unset = build(actors)
    assert all("x-quorum-initial-group-size" not in q.arguments for q in unset.queues)
    replicated = build_topology(
        "ns", actors, queue_type="quorum", delivery_limit=20, delay_tiers_ms=(100,), quorum_initial_group_size=3
    )
    for queue in replicated.queues:
        quorum = queue.arguments["x-queue-type"] == "quorum"
        assert queue.arguments.get("x-quorum-initial-group-size") == (3 if quorum else None)
        assert {**queue_named(unset, queue.name).arguments, **queue.arguments} == dict(queue.arguments)
    assert {q.arguments["x-queue-type"] for q in replicated.queues} == {"quorum", "classic"}
    classic = build_topology(
        "ns", actors, queue_type="classic", delivery_limit=20, delay_tiers_ms=(100,), quorum_initial_group_size=3
    )
    assert all(
        ("x-quorum-initial-group-size" in q.arguments) == (q.arguments["x-queue-type"] == "quorum")
        for q in classic.queues
    )


@only_on("rabbitmq")
def test_a_declared_namespace_has_two_queues_per_actor_one_per_tier_and_one_more_per_extra_partition(
    make_app: MakeApp,
) -> None:
    app = make_app()
    declared_actors: dict[str, dict[str, Any]] = {
        "charge": {},
        "ping": {"profile": "fire_and_forget"},
        "feed": {"profile": "ordered", "ordering_key": "user", "partitions": 4},
        "nightly": {"periodic": cron("0 2 * * *")},
        "export": {"profile": "long_running"},
    }
    for name, options in declared_actors.items():
        dramatiq.actor(broker=app.broker, actor_name=name, **options)(lambda user="": None)
    assert isinstance(app.broker, ExchangeBroker)
    app.broker.ensure_topology()

    namespace = app.settings.namespace
    declared = sorted(q for q in listed("list_queues", amqp_url=AMQP_URL) if q.startswith(f"{namespace}."))
    actors = sorted(app.broker.actors)  # with the framework's own, declared with the first of a kind

    assert actors == sorted(["charge", "ping", "feed", "nightly", "export", DEADLINE_CHECK, CHECK, WATCHDOG])
    assert len(declared) == 2 * len(actors) + len(TEST_DELAY_TIERS_S) + (4 - 1)  # docs/concepts/topology.md's count
    assert declared == sorted(q.name for q in app.broker.topology.queues)
