"""AMQP topic matching and the route of direct, fan-out and event messages."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest

from pipelines import options as opt
from pipelines.wire import naming
from pipelines.wire.routing import Route, route_of, topic_matches


def message(*, actor_name: str = "", options: dict[str, Any] | None = None) -> dramatiq.Message[Any]:
    return dramatiq.Message(
        queue_name="default" if actor_name else "",
        actor_name=actor_name,
        args=(),
        kwargs={},
        options=options or {},
        message_id="m-1",
    )


@pytest.mark.parametrize(
    ("pattern", "routing_key", "expected"),
    [
        ("order.placed", "order.placed", True),
        ("order.placed", "order.paid", False),
        ("order.placed", "order", False),
        ("order", "order.placed", False),
        ("order.placed", "order.placed.eu", False),
    ],
)
def test_literal_words_match_only_themselves(pattern: str, routing_key: str, expected: bool) -> None:
    assert topic_matches(pattern, routing_key) is expected


@pytest.mark.parametrize(
    ("pattern", "routing_key", "expected"),
    [
        ("*", "order", True),
        ("*", "order.placed", False),
        ("order.*", "order.placed", True),
        ("order.*", "order", False),
        ("order.*", "order.placed.eu", False),
        ("*.placed", "order.placed", True),
        ("*.placed", "placed", False),
        ("*.*", "a.b", True),
        ("*.*", "a", False),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.c", False),
    ],
)
def test_star_matches_exactly_one_word(pattern: str, routing_key: str, expected: bool) -> None:
    assert topic_matches(pattern, routing_key) is expected


@pytest.mark.parametrize(
    ("pattern", "routing_key", "expected"),
    [
        ("#", "order", True),
        ("#", "order.placed.eu", True),
        ("order.#", "order", True),
        ("order.#", "order.placed", True),
        ("order.#", "order.placed.eu", True),
        ("order.#", "invoice.order", False),
        ("#.placed", "placed", True),
        ("#.placed", "order.placed", True),
        ("#.placed", "order.placed.eu", False),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.b.b.c", True),
        ("a.#.c", "a.b.d", False),
        ("#.#", "a.b", True),
        ("a.*.#", "a", False),
        ("a.*.#", "a.b", True),
        ("*.#.*", "a", False),
        ("*.#.*", "a.b", True),
    ],
)
def test_hash_matches_zero_or_more_words(pattern: str, routing_key: str, expected: bool) -> None:
    assert topic_matches(pattern, routing_key) is expected


@pytest.mark.parametrize(
    ("routing_key", "expected"),
    [
        ("b", True),
        ("a.b", True),
        ("b.c", True),
        ("a.b.c", True),
        ("x.y.b.z", True),
        ("bb", False),
        ("a.bb.c", False),
        ("a.b-c", False),
        ("a.c", False),
    ],
)
def test_hash_around_a_word_matches_it_anywhere_but_not_inside_another_word(routing_key: str, expected: bool) -> None:
    assert topic_matches("#.b.#", routing_key) is expected


@pytest.mark.parametrize(
    ("actor_names", "actor", "expected"),
    [
        (["charge"], "charge", True),
        (["audit", "email", "ship"], "email", True),
        (["audit", "email", "ship"], "audit", True),
        (["audit", "email", "ship"], "ship", True),
        (["audit", "email", "ship"], "mail", False),
        (["send_email"], "email", False),
        (["send-email"], "send", False),
    ],
)
def test_an_actor_binding_matches_exactly_the_routing_keys_that_name_the_actor(
    actor_names: list[str], actor: str, expected: bool
) -> None:
    routing_key = naming.routing_key_for(actor_names)
    assert topic_matches(naming.actor_binding_key(actor), routing_key) is expected


def test_a_direct_message_routes_to_the_work_exchange_by_its_actor_name() -> None:
    assert route_of(message(actor_name="charge")) == Route("work", "charge")


def test_a_fan_out_message_routes_by_its_sorted_branch_actor_names() -> None:
    branches: dict[str, dict[str, Any]] = {"ship": {}, "email": {}, "audit": {}}
    assert route_of(message(options={opt.BRANCHES: branches})) == Route("work", "audit.email.ship")


def test_an_event_routes_to_the_events_exchange_by_its_topic() -> None:
    assert route_of(message(options={opt.EVENT_TOPIC: "order.placed"})) == Route("events", "order.placed")


@pytest.mark.parametrize("options", [{}, {opt.BRANCHES: {}}, {opt.EVENT_TOPIC: ""}, {"unrelated": 1}])
def test_a_message_without_actor_branches_or_topic_has_no_route(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="m-1 names no actor, branches or event topic"):
        route_of(message(options=options))
