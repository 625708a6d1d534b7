"""Names of exchanges, queues and run-store keys, and the validity checks of names and topics."""

from __future__ import annotations

import itertools

import pytest
from redis.crc import key_slot

from pipelines.wire import naming

NAMESPACES = ["prod", "prod-eu", "prod_eu", "staging", "p", "test-run-1"]
QUEUE_NAMES = ["default", "images", "events"]
ACTOR_NAMES = ["charge", "send_email", "resize-image", "work", "dead", "delay"]


def amqp_names(namespace: str) -> set[str]:
    """Every exchange and queue name a namespace declares for a sample of actors and tiers."""
    names = {
        naming.work_exchange(namespace),
        naming.events_exchange(namespace),
        naming.dead_letter_exchange(namespace),
        naming.delay_exchange(namespace),
    }
    for queue_name, actor_name in itertools.product(QUEUE_NAMES, ACTOR_NAMES):
        queue = naming.actor_queue(namespace, queue_name, actor_name)
        names |= {queue, naming.dead_letter_queue(queue), naming.readers_queue(queue)}
    names |= {naming.delay_queue(namespace, tier) for tier in (100, 1000, 30_000)}
    return names


def store_keys(namespace: str) -> set[str]:
    """Every run-store key a namespace writes for a sample of run ids and idempotency keys."""
    ids = ["abc123", "order-42", "x"]
    return {naming.run_key(namespace, i) for i in ids} | {
        naming.run_key(namespace, naming.run_id_for_key(namespace, i)) for i in ids
    }


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_exchange_and_queue_name_starts_with_the_namespace_word(namespace: str) -> None:
    for name in amqp_names(namespace):
        assert name.split(".")[0] == namespace, name


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_run_store_key_starts_with_the_namespace(namespace: str) -> None:
    for key in store_keys(namespace):
        assert key.startswith(f"{namespace}:"), key


@pytest.mark.parametrize(("first", "second"), list(itertools.combinations(NAMESPACES, 2)))
def test_two_namespaces_never_share_a_name(first: str, second: str) -> None:
    assert amqp_names(first).isdisjoint(amqp_names(second))
    assert store_keys(first).isdisjoint(store_keys(second))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (naming.work_exchange("prod"), "prod.work"),
        (naming.events_exchange("prod"), "prod.events"),
        (naming.dead_letter_exchange("prod"), "prod.dead"),
        (naming.delay_exchange("prod"), "prod.delay"),
        (naming.actor_queue("prod", "default", "charge"), "prod.default.charge"),
        (naming.dead_letter_queue("prod.default.charge"), "prod.default.charge.dead"),
        (naming.readers_queue("prod.long_running.export"), "prod.long_running.export.readers"),
        (naming.delay_queue("prod", 1500), "prod.delay.1500ms"),
        (naming.actor_binding_key("charge"), "#.charge.#"),
        (naming.run_key("prod", "abc"), "prod:run:{abc}"),
        (naming.tick_key("prod", "nightly", 60_000), "prod:tick:{nightly}:60000"),
        (naming.schedule_key("prod", "nightly"), "prod:schedule:{nightly}"),
    ],
)
def test_names_are_predictable_from_the_namespace(name: str, expected: str) -> None:
    assert name == expected


def test_a_keyed_runs_id_is_its_keys_in_its_namespace_only() -> None:
    assert naming.run_id_for_key("prod", "order-42") == naming.run_id_for_key("prod", "order-42")
    assert naming.run_id_for_key("prod", "order-42") != naming.run_id_for_key("staging", "order-42")
    assert naming.run_id_for_key("prod", "order-42") != naming.run_id_for_key("prod", "order-43")


def test_every_key_of_one_run_and_of_one_scheduled_job_is_in_one_redis_cluster_slot() -> None:
    run = naming.run_key("prod", "abc")
    assert len({key_slot(k.encode()) for k in (run, run + ":steps", run + ":bar:0.1", run + ":bar:0.1:meta")}) == 1
    job = {key_slot(naming.tick_key("prod", "nightly", t).encode()) for t in (0, 60_000)}
    assert job == {key_slot(naming.schedule_key("prod", "nightly").encode())}
    assert job == {key_slot(naming.sweep_key("prod", "nightly").encode())}


@pytest.mark.parametrize(
    ("actor_names", "expected"),
    [
        (["charge"], "charge"),
        (["ship", "email", "audit"], "audit.email.ship"),
        (["b", "a", "b"], "a.b"),
    ],
)
def test_routing_key_is_the_sorted_distinct_actor_names_joined_by_dots(actor_names: list[str], expected: str) -> None:
    assert naming.routing_key_for(actor_names) == expected


@pytest.mark.parametrize("namespace", ["prod", "p", "staging-eu", "test_run_1", "a1", "a" * 63])
def test_lower_case_words_are_valid_namespaces(namespace: str) -> None:
    assert naming.is_valid_namespace(namespace)


@pytest.mark.parametrize(
    "namespace",
    ["", "Prod", "PROD", "1prod", "-prod", "_prod", "prod.eu", "prod eu", "prod:eu", "prod/eu", "a" * 64],
)
def test_namespaces_that_are_not_lower_case_words_are_invalid(namespace: str) -> None:
    assert not naming.is_valid_namespace(namespace)


@pytest.mark.parametrize("actor_name", ["charge", "Charge", "send_email", "_private", "resize-image", "a1", "x"])
def test_single_words_are_valid_actor_names(actor_name: str) -> None:
    assert naming.is_valid_actor_name(actor_name)


@pytest.mark.parametrize(
    "actor_name", ["order.charge", "a.b.c", ".charge", "charge.", "", "1charge", "-charge", "*", "#", "a b", "a*"]
)
def test_actor_names_with_dots_or_wildcards_are_invalid(actor_name: str) -> None:
    assert not naming.is_valid_actor_name(actor_name)


@pytest.mark.parametrize("topic", ["order.placed", "order", "a.b.c", "user-1.signed_up", "2024.report", "a" * 255])
def test_dot_separated_words_are_valid_topics(topic: str) -> None:
    assert naming.is_valid_topic(topic)


@pytest.mark.parametrize(
    "topic", ["", ".order", "order.", "order..placed", "order.*", "order.#", "#", "a b", "order/placed", "a" * 256]
)
def test_topics_with_empty_words_wildcards_or_over_255_bytes_are_invalid(topic: str) -> None:
    assert not naming.is_valid_topic(topic)


@pytest.mark.parametrize(
    "pattern", ["order.placed", "order.*", "order.#", "#", "*", "#.placed", "*.placed.#", "#.b.#", "a-1.*.x_y"]
)
def test_topic_patterns_may_use_star_and_hash_as_whole_words(pattern: str) -> None:
    assert naming.is_valid_topic_pattern(pattern)


@pytest.mark.parametrize(
    "pattern", ["", "order.", ".order", "order..placed", "order.pl*", "or#der", "**", "##", "*#", "a b", "order/*"]
)
def test_topic_patterns_with_empty_words_or_partial_wildcards_are_invalid(pattern: str) -> None:
    assert not naming.is_valid_topic_pattern(pattern)


def test_topic_patterns_over_255_bytes_are_invalid() -> None:
    assert not naming.is_valid_topic_pattern("order." + "a" * 256)
