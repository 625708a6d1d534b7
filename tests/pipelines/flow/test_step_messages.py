"""The messages that start a set of steps, and the argument check made before a run starts."""

from __future__ import annotations

from collections import Counter
from typing import Any

import dramatiq
import pytest

from pipelines import options as opt
from pipelines.broker import MemoryBroker
from pipelines.config.sections import BrokerConfig
from pipelines.errors import DefinitionError
from pipelines.flow.step_messages import StepInput, _check_arguments, step_messages
from pipelines.sending.outbound import Outbound
from pipelines.wire.naming import MAX_NAME_BYTES
from pipelines.wire.routing import route_of
from pipelines.wire.shared_bodies import resolve
from pipelines.wire.steps import Frame, Leaf, StepAddress

UP = (Frame("p", "0.1", 0, 3), Frame("c", "0", 1, 2))
GIVEN = StepInput(("previous",), {"trace": "t-1"})


def leaf(
    node: str,
    actor_name: str,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    queue_name: str = "default",
) -> Leaf:
    return Leaf(node, actor_name, queue_name, args, kwargs or {}, options or {}, UP)


def messages_for(leaves: list[Leaf], given: StepInput = GIVEN) -> list[dramatiq.Message[Any]]:
    return step_messages(leaves, run_id="run-1", pipeline="checkout", given=given)


def node_of(message: dramatiq.Message[Any]) -> str:
    address = StepAddress.of(message)
    assert address is not None
    return address.node


def delivered(messages: list[dramatiq.Message[Any]]) -> list[dramatiq.Message[Any]]:
    """What each actor's queue runs: every message resolved once per actor it routes to."""
    copies: list[dramatiq.Message[Any]] = []
    for message in messages:
        actors = [message.actor_name] if message.actor_name else sorted(message.options[opt.BRANCHES])
        copies.extend(resolve(message, actor_name=a, queue_name="default") for a in actors)
    return copies


def test_leaves_of_distinct_actors_sharing_input_are_packed_into_one_fan_out_message() -> None:
    leaves = [leaf("0.1.0", "ship", "dhl"), leaf("0.1.1", "email", kwargs={"to": "x"}), leaf("0.1.2", "audit")]
    (message,) = messages_for(leaves)
    assert (message.actor_name, message.queue_name) == ("", "")
    assert message.args == ("previous",)
    assert message.kwargs == {"trace": "t-1"}
    assert set(message.options) == {opt.BRANCHES, opt.PIPELINE}
    assert message.options[opt.PIPELINE] == "checkout"
    branches = message.options[opt.BRANCHES]
    assert set(branches) == {"ship", "email", "audit"}
    assert branches["ship"] == {
        "args": ["dhl"],
        "kwargs": {},
        "options": {opt.STEP: {"run": "run-1", "node": "0.1.0", "up": [["p", "0.1", 0, 3], ["c", "0", 1, 2]]}},
    }
    assert branches["email"]["kwargs"] == {"to": "x"}
    assert route_of(message).routing_key == "audit.email.ship"


def test_two_leaves_of_the_same_actor_go_to_two_messages() -> None:
    messages = messages_for([leaf("0.0", "resize", "img-1"), leaf("0.1", "resize", "img-2")])
    assert [m.actor_name for m in messages] == ["resize", "resize"]
    assert [m.args for m in messages] == [("img-1", "previous"), ("img-2", "previous")]
    assert len({m.message_id for m in messages}) == 2


def test_a_map_beside_another_actor_gives_each_queue_one_copy_per_leaf() -> None:
    leaves = [leaf("0.0", "resize", 1), leaf("0.1", "resize", 2), leaf("0.2", "thumb"), leaf("0.3", "resize", 3)]
    messages = messages_for(leaves)
    assert len(messages) == 3
    for message in messages:
        route = route_of(message).routing_key.split(".")
        assert len(route) == len(set(route))
    copies = delivered(messages)
    assert sorted(node_of(copy) for copy in copies) == ["0.0", "0.1", "0.2", "0.3"]


def test_a_single_leaf_is_a_direct_message_with_bound_args_then_the_given_input() -> None:
    single = leaf("0.1.0", "charge", 42, kwargs={"currency": "eur"}, options={"max_retries": 2}, queue_name="billing")
    (message,) = messages_for([single])
    assert message.actor_name == "charge"
    assert message.queue_name == "billing"
    assert message.args == (42, "previous")
    assert message.kwargs == {"currency": "eur", "trace": "t-1"}
    assert message.options == {
        "max_retries": 2,
        opt.STEP: {"run": "run-1", "node": "0.1.0", "up": [["p", "0.1", 0, 3], ["c", "0", 1, 2]]},
        opt.PIPELINE: "checkout",
    }
    assert StepAddress.of(message) == StepAddress("run-1", "0.1.0", UP)


def test_the_given_keyword_arguments_win_over_bound_ones() -> None:
    (message,) = messages_for([leaf("0.0", "charge", kwargs={"trace": "bound", "k": 1})])
    assert message.kwargs == {"trace": "t-1", "k": 1}


def test_no_given_input_leaves_only_the_bound_arguments() -> None:
    (message,) = messages_for([leaf("0.0", "charge", 1, kwargs={"k": 2})], StepInput())
    assert (message.args, message.kwargs) == ((1,), {"k": 2})


def test_a_pipe_ignore_leaf_gets_only_its_bound_arguments() -> None:
    ignoring = leaf("0.1", "notify", "ops", kwargs={"k": 1}, options={opt.PIPE_IGNORE: True})
    (message,) = messages_for([ignoring])
    assert message.args == ("ops",)
    assert message.kwargs == {"k": 1}


def test_a_pipe_ignore_leaf_packed_with_other_actors_still_gets_only_its_bound_arguments() -> None:
    ignoring = leaf("0.1.0", "notify", "ops", kwargs={"k": 1}, options={opt.PIPE_IGNORE: True})
    (message,) = messages_for([ignoring, leaf("0.1.1", "charge", 42)])
    copies = {copy.actor_name: copy for copy in delivered([message])}
    assert copies["charge"].args == (42, "previous")
    assert copies["notify"].args == ("ops",)
    assert copies["notify"].kwargs == {"k": 1}


def test_a_packed_leaf_is_resolved_to_what_a_direct_message_would_carry() -> None:
    leaves = [leaf("0.0", "ship", "dhl", kwargs={"k": 1}, options={"max_retries": 3}), leaf("0.1", "email", "x")]
    packed = {copy.actor_name: copy for copy in delivered(messages_for(leaves))}
    for single in leaves:
        (direct,) = messages_for([single])
        copy = packed[single.actor_name]
        assert (copy.args, copy.kwargs, copy.options) == (direct.args, direct.kwargs, direct.options)


def test_no_leaves_need_no_messages() -> None:
    assert messages_for([]) == []


def long_actor_names(count: int, length: int) -> list[str]:
    return [f"actor_{i:03d}_".ljust(length, "x") for i in range(count)]


@pytest.mark.parametrize(
    ("count", "length", "expected_messages"),
    [
        (40, 50, 8),  # five 50-byte names and four dots make 254 bytes
        (2, 127, 1),  # 127 + 1 + 127 = 255 bytes: still one key
        (2, 128, 2),  # 128 + 1 + 128 = 257 bytes: two keys
        (3, 85, 2),  # 85 * 3 + 2 = 257 bytes
        (30, 200, 30),
        (300, 10, 14),  # 23 ten-byte names per key (252 bytes): 13 full keys and one of 1
    ],
)
def test_packing_never_builds_a_routing_key_longer_than_255_bytes(
    count: int, length: int, expected_messages: int
) -> None:
    names = long_actor_names(count, length)
    messages = messages_for([leaf(f"0.{i}", name) for i, name in enumerate(names)])
    for message in messages:
        assert len(route_of(message).routing_key.encode()) <= MAX_NAME_BYTES
    assert len(messages) == expected_messages
    assert sorted(copy.actor_name for copy in delivered(messages)) == sorted(names)


def test_packing_many_leaves_of_many_actors_delivers_each_leaf_exactly_once() -> None:
    names = long_actor_names(12, 60)
    leaves = [leaf(f"0.{i}", names[i % len(names)], i) for i in range(50)]
    messages = messages_for(leaves)
    for message in messages:
        assert len(route_of(message).routing_key.encode()) <= MAX_NAME_BYTES
    assert Counter(node_of(copy) for copy in delivered(messages)) == Counter(leaf.node for leaf in leaves)


@pytest.fixture(scope="module")
def broker() -> MemoryBroker:
    broker = MemoryBroker(config=BrokerConfig(url="memory://"), namespace="unit", outbound=Outbound())

    def charge(order_id: int, previous: Any) -> None:
        return None

    def notify(channel: str) -> None:
        return None

    dramatiq.actor(actor_name="charge", broker=broker)(charge)
    dramatiq.actor(actor_name="notify", broker=broker)(notify)
    return broker


def test_arguments_that_fit_every_actor_pass_the_check(broker: MemoryBroker) -> None:
    leaves = [leaf("0.0", "charge", 1), leaf("0.1", "notify", "ops", options={opt.PIPE_IGNORE: True})]
    _check_arguments(broker, leaves, StepInput(("previous",)))


def test_arguments_that_do_not_fit_name_the_step_and_the_actor(broker: MemoryBroker) -> None:
    with pytest.raises(DefinitionError, match=r"step 0\.1 \(notify\)"):
        _check_arguments(broker, [leaf("0.1", "notify", "ops")], StepInput(("previous",)))
    with pytest.raises(DefinitionError, match=r"step 0\.0 \(charge\).*pipe_ignore"):
        _check_arguments(broker, [leaf("0.0", "charge", 1, 2)], StepInput(("previous",)))
