"""Resolving what a queue received (direct, fan-out or event body) into the message its actor runs."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest

from pipelines import options as opt
from pipelines.broker.common import event_message
from pipelines.wire.shared_bodies import UnresolvableMessage, resolve

STEP_SHIP = {"run": "r1", "node": "0.1.0", "up": [["p", "0.1", 0, 2]]}
STEP_EMAIL = {"run": "r1", "node": "0.1.1", "up": [["p", "0.1", 1, 2]]}


def direct(actor_name: str = "charge", queue_name: str = "default") -> dramatiq.Message[Any]:
    return dramatiq.Message(
        queue_name=queue_name,
        actor_name=actor_name,
        args=(42,),
        kwargs={"currency": "eur"},
        options={opt.STEP: STEP_SHIP},
        message_id="m-1",
        message_timestamp=1000,
    )


def fan_out_message() -> dramatiq.Message[Any]:
    return dramatiq.Message(
        queue_name="",
        actor_name="",
        args=("order-7",),
        kwargs={"priority": "high", "source": "shared"},
        options={
            opt.BRANCHES: {
                "ship": {
                    "args": ["dhl", 2],
                    "kwargs": {"source": "branch", "express": True},
                    "options": {opt.STEP: STEP_SHIP, "max_retries": 1},
                },
                "email": {"args": [], "kwargs": {}, "options": {opt.STEP: STEP_EMAIL}},
            },
            opt.PIPELINE: "checkout",
            "max_retries": 5,
        },
        message_id="m-2",
        message_timestamp=2000,
    )


def test_a_direct_message_for_this_actor_is_kept_with_its_id() -> None:
    message = direct()
    resolved = resolve(message, actor_name="charge", queue_name="default")
    assert resolved == message
    assert resolved.message_id == "m-1"


def test_a_direct_message_takes_the_queue_name_it_arrived_on_and_keeps_its_id() -> None:
    resolved = resolve(direct(queue_name="default"), actor_name="charge", queue_name="default.DQ")
    assert resolved.queue_name == "default.DQ"
    assert resolved.message_id == "m-1"
    assert (resolved.actor_name, resolved.args, resolved.kwargs) == ("charge", (42,), {"currency": "eur"})
    assert resolved.options == {opt.STEP: STEP_SHIP}


def test_a_direct_message_for_another_actor_is_unresolvable() -> None:
    with pytest.raises(UnresolvableMessage, match="message for actor 'charge' arrived on the queue of 'ship'"):
        resolve(direct(), actor_name="ship", queue_name="default")


def test_a_fan_out_gives_the_branch_arguments_first_then_the_shared_input() -> None:
    resolved = resolve(fan_out_message(), actor_name="ship", queue_name="logistics")
    assert resolved.actor_name == "ship"
    assert resolved.queue_name == "logistics"
    assert resolved.args == ("dhl", 2, "order-7")


def test_a_fan_out_merges_branch_and_shared_keyword_arguments() -> None:
    resolved = resolve(fan_out_message(), actor_name="ship", queue_name="logistics")
    assert resolved.kwargs == {"express": True, "priority": "high", "source": "shared"}


def test_a_fan_out_merges_branch_options_over_shared_ones_and_drops_the_branches() -> None:
    resolved = resolve(fan_out_message(), actor_name="ship", queue_name="logistics")
    assert resolved.options == {opt.PIPELINE: "checkout", "max_retries": 1, opt.STEP: STEP_SHIP}
    assert opt.BRANCHES not in resolved.options


def test_each_fan_out_copy_gets_a_deterministic_id_of_its_own() -> None:
    message = fan_out_message()
    ship = resolve(message, actor_name="ship", queue_name="default")
    email = resolve(message, actor_name="email", queue_name="default")
    assert ship.message_id == "m-2.ship"
    assert email.message_id == "m-2.email"
    assert resolve(message, actor_name="ship", queue_name="default").message_id == ship.message_id
    assert ship.message_timestamp == email.message_timestamp == 2000


def test_a_fan_out_branch_without_bound_arguments_gets_only_the_shared_input() -> None:
    resolved = resolve(fan_out_message(), actor_name="email", queue_name="default")
    assert resolved.args == ("order-7",)
    assert resolved.kwargs == {"priority": "high", "source": "shared"}
    assert resolved.options == {opt.PIPELINE: "checkout", "max_retries": 5, opt.STEP: STEP_EMAIL}


def test_an_empty_branch_is_resolved_with_the_shared_input() -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="", actor_name="", args=(1,), kwargs={}, options={opt.BRANCHES: {"ship": {}}}, message_id="m"
    )
    resolved = resolve(message, actor_name="ship", queue_name="default")
    assert (resolved.args, resolved.kwargs, resolved.options) == ((1,), {}, {})


def test_a_fan_out_without_a_branch_for_this_actor_is_unresolvable() -> None:
    with pytest.raises(UnresolvableMessage, match="no branch for actor 'audit'"):
        resolve(fan_out_message(), actor_name="audit", queue_name="default")


def test_resolving_a_fan_out_does_not_change_the_shared_body() -> None:
    message = fan_out_message()
    resolve(message, actor_name="ship", queue_name="default")
    assert message == fan_out_message()


def test_an_event_goes_to_the_queue_actor_with_the_payload_as_argument() -> None:
    event = event_message("order.placed", {"order_id": 7})
    resolved = resolve(event, actor_name="audit", queue_name="events")
    assert resolved.actor_name == "audit"
    assert resolved.queue_name == "events"
    assert resolved.args == ({"order_id": 7},)
    assert resolved.kwargs == {}
    assert resolved.options[opt.EVENT_TOPIC] == "order.placed"
    assert resolved.message_id == f"{event.message_id}.audit"


def test_each_subscriber_of_an_event_gets_its_own_id() -> None:
    event = event_message("order.placed", 1)
    ids = {resolve(event, actor_name=name, queue_name="default").message_id for name in ("audit", "mailer")}
    assert len(ids) == 2


def test_a_message_without_actor_branches_or_topic_is_unresolvable() -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(queue_name="", actor_name="", args=(), kwargs={}, options={})
    with pytest.raises(UnresolvableMessage, match="names no actor, branches or event topic"):
        resolve(message, actor_name="charge", queue_name="default")


def test_an_unresolvable_message_is_a_value_error() -> None:
    assert issubclass(UnresolvableMessage, ValueError)
