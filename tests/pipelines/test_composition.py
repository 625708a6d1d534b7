"""Composition primitives: chain, fan_out, group, for_each, chord, step and as_node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from pipelines.composition import (
    Chain,
    Node,
    Parallel,
    Step,
    as_node,
    chain,
    chord,
    fan_out,
    for_each,
    group,
    shape_name,
    step,
)
from pipelines.errors import DefinitionError

BROKER = StubBroker()


def _charge(order_id: int) -> None:
    return None


def _resize(size: int, image_id: str, mode: str = "fit") -> None:
    return None


def _publish(*results: Any) -> None:
    return None


charge = dramatiq.actor(actor_name="charge", broker=BROKER)(_charge)
resize = dramatiq.actor(actor_name="resize", queue_name="images", broker=BROKER)(_resize)
publish = dramatiq.actor(actor_name="publish", broker=BROKER)(_publish)

A, B, C, D = (Step(name) for name in ("a", "b", "c", "d"))
NOT_AN_ACTOR: Any = "charge"


def test_chain_flattens_nested_chains() -> None:
    assert chain(A, chain(B, chain(C, D))) == Chain((A, B, C, D))
    assert chain(chain(A, B), chain(C, D)) == Chain((A, B, C, D))
    assert chain(Chain((A, B))) == Chain((A, B))


def test_chain_keeps_a_parallel_as_one_child() -> None:
    assert chain(A, fan_out(B, C), D) == Chain((A, Parallel((B, C), kind="fan_out"), D))


@pytest.mark.parametrize("build", [chain, fan_out, group], ids=["chain", "fan_out", "group"])
def test_a_primitive_without_steps_is_a_definition_error(build: Callable[..., Node]) -> None:
    with pytest.raises(DefinitionError, match=rf"{build.__name__}\(\) needs at least one step"):
        build()


@pytest.mark.parametrize(
    "empty", [[], (), iter(()), (x for x in range(0))], ids=["list", "tuple", "iterator", "generator"]
)
def test_group_of_an_empty_iterable_is_a_definition_error(empty: Any) -> None:
    with pytest.raises(DefinitionError, match=r"group\(\) needs at least one step"):
        group(empty)


def test_fan_out_is_a_parallel_of_kind_fan_out() -> None:
    assert fan_out(A, B) == Parallel((A, B), kind="fan_out")


def test_group_takes_steps_as_arguments_or_as_one_iterable() -> None:
    expected = Parallel(tuple(Step("charge", args=(i,)) for i in range(3)), kind="group")
    assert group(charge.message(0), charge.message(1), charge.message(2)) == expected
    assert group([charge.message(i) for i in range(3)]) == expected
    assert group(tuple(charge.message(i) for i in range(3))) == expected
    assert group(charge.message(i) for i in range(3)) == expected


def test_group_of_one_step_or_one_parallel_is_not_treated_as_an_iterable() -> None:
    assert group(A) == Parallel((A,))
    inner = fan_out(A, B)
    assert group(inner) == Parallel((inner,))
    assert group(charge) == Parallel((Step("charge"),))


def test_group_of_one_value_that_is_neither_a_step_nor_iterable_names_it() -> None:
    with pytest.raises(DefinitionError, match="not 42"):
        group(42)


def test_for_each_builds_one_step_per_item_with_the_item_as_argument() -> None:
    assert for_each(resize, ["img-1", "img-2"]) == Parallel(
        (Step("resize", "images", ("img-1",)), Step("resize", "images", ("img-2",))), kind="group"
    )
    assert for_each(charge, (i for i in range(4))).children == tuple(Step("charge", args=(i,)) for i in range(4))


def test_for_each_of_one_item_is_a_parallel_of_one_step() -> None:
    assert for_each(charge, [7]) == Parallel((Step("charge", args=(7,)),))


def test_for_each_of_no_items_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match=r"for_each\(charge, \.\.\.\) needs at least one item"):
        for_each(charge, [])


def test_for_each_and_step_take_an_actor_first() -> None:
    with pytest.raises(DefinitionError, match=r"for_each\(\) takes an actor first, not 'charge'"):
        for_each(NOT_AN_ACTOR, [1])
    with pytest.raises(DefinitionError, match=r"step\(\) takes an actor first, not 'charge'"):
        step(NOT_AN_ACTOR, 1)


def test_chord_is_a_chain_of_the_members_in_parallel_then_the_callback() -> None:
    members = [charge.message(1), charge.message(2)]
    assert chord(members, then=publish) == Chain(
        (Parallel((Step("charge", args=(1,)), Step("charge", args=(2,)))), Step("publish"))
    )


def test_chord_keeps_a_given_parallel_as_its_header() -> None:
    header = fan_out(A, B)
    assert chord(header, then=C) == Chain((header, C))
    assert chord(for_each(charge, [1, 2]), then=step(publish, "album")).children[1] == Step("publish", args=("album",))


def test_chord_takes_its_members_from_a_generator() -> None:
    assert chord((charge.message(i) for i in range(2)), then=C) == Chain((for_each(charge, range(2)), C))


def test_a_chord_without_members_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError):
        chord([], then=C)


def test_as_node_turns_a_message_into_a_step_with_its_arguments_and_options() -> None:
    message = resize.message_with_options(args=(256, "img-1"), kwargs={"mode": "crop"}, pipe_ignore=True)
    assert as_node(message) == Step(
        actor_name="resize",
        queue_name="images",
        args=(256, "img-1"),
        kwargs={"mode": "crop"},
        options={"pipe_ignore": True},
    )


def test_as_node_turns_an_actor_into_a_step_without_arguments() -> None:
    assert as_node(resize) == Step(actor_name="resize", queue_name="images")


def test_as_node_returns_a_node_unchanged() -> None:
    node = chain(A, B)
    assert as_node(node) is node
    assert as_node(A) is A


@pytest.mark.parametrize(
    "value",
    [42, "charge", None, {"actor": "charge"}, _charge, [A]],
    ids=["int", "str", "none", "dict", "plain-function", "list"],
)
def test_as_node_rejects_other_values_naming_them(value: object) -> None:
    with pytest.raises(DefinitionError) as raised:
        as_node(value)
    assert repr(value) in str(raised.value)


@pytest.mark.parametrize("build", [chain, fan_out], ids=["chain", "fan_out"])
def test_primitives_reject_a_value_that_is_not_a_step(build: Callable[..., Node]) -> None:
    with pytest.raises(DefinitionError, match="'oops' is not a pipeline step"):
        build(A, "oops")


def test_step_binds_leading_arguments_and_keyword_arguments() -> None:
    assert step(resize, 256, mode="fill") == Step("resize", "images", (256,), {"mode": "fill"})
    assert step(charge) == Step("charge")


def test_primitives_accept_messages_actors_and_nodes_alike() -> None:
    built = chain(charge.message(1), resize, fan_out(step(resize, 64), B))
    assert built == Chain(
        (
            Step("charge", args=(1,)),
            Step("resize", "images"),
            Parallel((Step("resize", "images", (64,)), B), kind="fan_out"),
        )
    )


def test_a_run_started_without_a_name_is_named_after_its_first_and_last_actors() -> None:
    one, two, three = (Step(actor_name=name) for name in ("charge", "ship", "notify"))

    assert shape_name(one) == "charge"
    assert shape_name(chain(one, fan_out(two, two))) == "charge>ship"
    assert shape_name(chord(group(one, two, one), then=three)) == "charge>...>notify"
    assert shape_name(group(*[one] * 50)) == shape_name(group(*[one] * 3)) == "charge"
