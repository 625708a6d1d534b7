"""Compiling a pipeline tree: step ids, ancestor frames, entry steps and chain continuations."""

from __future__ import annotations

from typing import Any

import dramatiq
import orjson
import pytest

from pipelines import options as opt
from pipelines.composition import Chain, Node, Parallel, Step
from pipelines.context import MessageContext
from pipelines.dead_letters.reasons import reason_for
from pipelines.errors import DefinitionError
from pipelines.flow.plan import Plan, compile_plan
from pipelines.wire.codec import MalformedMessage
from pipelines.wire.steps import ROOT, Frame, Leaf, MalformedStepAddress, StepAddress

A, B, C, D, E = (Step(name) for name in ("a", "b", "c", "d", "e"))


def ids(leaves: tuple[Leaf, ...]) -> list[str]:
    return [leaf.node for leaf in leaves]


def starts(plan: Plan) -> dict[str, list[str]]:
    return {node: ids(leaves) for node, leaves in plan.starts.items()}


NESTED = Chain((A, Parallel((B, Chain((C, D)))), E))


def test_step_ids_are_paths_in_the_tree() -> None:
    plan = compile_plan(NESTED)
    assert [(leaf.node, leaf.actor_name) for leaf in plan.leaves] == [
        ("0.0", "a"),
        ("0.1.0", "b"),
        ("0.1.1.0", "c"),
        ("0.1.1.1", "d"),
        ("0.2", "e"),
    ]
    assert all(leaf.node.startswith(ROOT + ".") for leaf in plan.leaves)


def test_frames_list_the_ancestors_nearest_first_with_kind_index_and_count() -> None:
    leaves = {leaf.node: leaf for leaf in compile_plan(NESTED).leaves}
    assert leaves["0.1.1.1"].up == (
        Frame("c", "0.1.1", 1, 2),
        Frame("p", "0.1", 1, 2),
        Frame("c", "0", 1, 3),
    )
    assert leaves["0.1.0"].up == (Frame("p", "0.1", 0, 2), Frame("c", "0", 1, 3))
    assert leaves["0.0"].up == (Frame("c", "0", 0, 3),)
    assert leaves["0.2"].up == (Frame("c", "0", 2, 3),)


def test_a_leaf_keeps_the_actor_queue_and_bound_arguments_of_its_step() -> None:
    step = Step("resize", "images", (256,), {"mode": "fit"}, {"pipe_ignore": True})
    (leaf,) = compile_plan(Parallel((step,))).leaves
    assert leaf == Leaf(
        "0.0", "resize", "images", (256,), {"mode": "fit"}, {"pipe_ignore": True}, (Frame("p", "0", 0, 1),)
    )


def test_a_single_step_root_is_wrapped_in_a_chain_so_its_id_is_0_0() -> None:
    plan = compile_plan(A)
    assert ids(plan.leaves) == ["0.0"]
    assert plan.leaves[0].up == (Frame("c", "0", 0, 1),)
    assert plan.entry == plan.leaves
    assert plan.starts == {}


@pytest.mark.parametrize(
    ("root", "entry"),
    [
        (A, ["0.0"]),
        (Chain((A, B, C)), ["0.0"]),
        (Parallel((A, B, C)), ["0.0", "0.1", "0.2"]),
        (Chain((Parallel((A, B)), C)), ["0.0.0", "0.0.1"]),
        (Parallel((Chain((A, B)), C)), ["0.0.0", "0.1"]),
        (Parallel((Chain((Parallel((A, B)), C)), D)), ["0.0.0.0", "0.0.0.1", "0.1"]),
        (NESTED, ["0.0"]),
    ],
    ids=["step", "chain", "parallel", "chain-of-parallel", "parallel-of-chains", "deep", "nested"],
)
def test_entry_steps_are_the_first_of_a_chain_and_every_member_of_a_parallel(root: Node, entry: list[str]) -> None:
    assert ids(compile_plan(root).entry) == entry


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        (A, {}),
        (Parallel((A, B)), {}),
        (Chain((A, B, C)), {"0.1": ["0.1"], "0.2": ["0.2"]}),
        (NESTED, {"0.1": ["0.1.0", "0.1.1.0"], "0.1.1.1": ["0.1.1.1"], "0.2": ["0.2"]}),
        (
            Chain((Parallel((A, B)), Parallel((C, Chain((D, E)))))),
            {"0.1": ["0.1.0", "0.1.1.0"], "0.1.1.1": ["0.1.1.1"]},
        ),
        (Parallel((Chain((A, B)), Chain((C, D)))), {"0.0.1": ["0.0.1"], "0.1.1": ["0.1.1"]}),
    ],
    ids=["step", "parallel", "chain", "nested", "chord-of-chords", "parallel-of-chains"],
)
def test_every_chain_child_after_the_first_starts_its_entry_leaves(root: Node, expected: dict[str, list[str]]) -> None:
    assert starts(compile_plan(root)) == expected


def test_continuations_hold_the_same_leaves_as_the_plan() -> None:
    plan = compile_plan(NESTED)
    for leaves in plan.starts.values():
        assert set(ids(leaves)) <= set(ids(plan.leaves))
        for leaf in leaves:
            assert leaf in plan.leaves


def test_the_first_child_of_a_chain_never_is_a_continuation() -> None:
    plan = compile_plan(NESTED)
    assert "0.0" not in plan.starts
    assert "0.1.1.0" not in plan.starts


@pytest.mark.parametrize(
    "frame", [Frame("c", "0", 0, 1), Frame("p", "0.1.2", 3, 4)], ids=["chain-frame", "parallel-frame"]
)
def test_a_frame_survives_json(frame: Frame) -> None:
    assert Frame.from_json(orjson.loads(orjson.dumps(frame.to_json()))) == frame


def test_a_frame_is_a_compact_json_list() -> None:
    assert Frame("p", "0.1", 1, 3).to_json() == ["p", "0.1", 1, 3]
    assert Frame.from_json(["p", "0.1", 1, 3]) == Frame("p", "0.1", 1, 3)


@pytest.mark.parametrize(
    "frame",
    [
        ["p", 0, 1, 3],  # a number as node id
        ["p", "0", "1", 3],  # index as text
        ["p", "0", 1, "3"],  # count as text
        ["p", "0", 0.9, 3],  # a fraction
        ["p", "0", True, 3],  # a boolean is not an index
        ["p", "0", 3, 3],  # index past count
        ["p", "0", -1, 3],
        ["p", {"id": "0"}, 0, 3],  # an object as node id
        ["p", "0.01", 0, 3],  # not a step id
        ["p", "0." + "1" * 1000, 0, 3],  # longer than any step id
    ],
)
def test_a_frame_is_taken_as_sent_or_refused_never_converted(frame: list[object]) -> None:
    with pytest.raises(ValueError, match="a frame's"):
        Frame.from_json(frame)


def test_a_pipeline_nested_past_the_longest_step_id_is_refused_when_defined() -> None:
    deep: Node = Step("charge", "billing", (), {}, {})
    for _ in range(600):
        deep = Chain((deep, Step("charge", "billing", (), {}, {})))
    with pytest.raises(DefinitionError, match="nests too deep"):
        compile_plan(deep)


def test_a_frame_of_an_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown frame kind 'x'"):
        Frame.from_json(["x", "0", 0, 1])


def test_every_leaf_survives_json() -> None:
    root = Chain((Step("charge", "billing", (1, "eur", [1, 2]), {"k": {"n": None}}, {"pipe_ignore": True}), NESTED))
    for leaf in compile_plan(root).leaves:
        data = orjson.loads(orjson.dumps(leaf.to_json()))
        assert Leaf.from_json(data) == leaf


def test_a_leaf_is_json_with_short_keys() -> None:
    leaf = Leaf("0.1", "charge", "billing", (1,), {"k": 2}, {"o": 3}, (Frame("c", "0", 1, 2),))
    assert leaf.to_json() == {
        "node": "0.1",
        "actor": "charge",
        "queue": "billing",
        "args": [1],
        "kwargs": {"k": 2},
        "options": {"o": 3},
        "up": [["c", "0", 1, 2]],
    }


def message_with(options: dict[str, Any]) -> dramatiq.Message[Any]:
    return dramatiq.Message(queue_name="default", actor_name="charge", args=(), kwargs={}, options=options)


def test_a_step_address_survives_its_option_as_json() -> None:
    address = StepAddress("run-1", "0.1.0", (Frame("p", "0.1", 0, 3), Frame("c", "0", 1, 2)))
    option = orjson.loads(orjson.dumps(address.to_option()))

    assert option == {"run": "run-1", "node": "0.1.0", "up": [["p", "0.1", 0, 3], ["c", "0", 1, 2]]}
    assert StepAddress.of(message_with({opt.STEP: option})) == address


def test_a_message_without_the_step_option_has_no_address() -> None:
    assert StepAddress.of(message_with({})) is None


@pytest.mark.parametrize(
    "value",
    [
        "run-1/0.1",
        ["run-1", "0.1", []],
        {"node": "0.1", "up": []},
        {"run": "run-1", "node": 7, "up": []},
        {"run": "", "node": "0.1", "up": []},
        {"run": "run-1", "node": "0.1"},
        {"run": "run-1", "node": "0.1", "up": "c,0,1,2"},
        {"run": "run-1", "node": "0.1", "up": [["x", "0", 1, 2]]},
        {"run": "run-1", "node": "0.1", "up": [["c", "0", 1]]},
        {"run": "run-1", "node": "0.1", "up": [{"kind": "c", "node": "0", "index": 1, "count": 2}]},
        {"run": "run-1", "node": "0.1", "up": [["c", "0", "one", 2]]},
    ],
    ids=[
        "a-string",
        "a-list",
        "no-run",
        "a-number-node",
        "an-empty-run",
        "no-frames",
        "frames-as-text",
        "a-frame-of-unknown-kind",
        "a-short-frame",
        "a-frame-as-an-object",
        "a-frame-with-a-word-index",
    ],
)
def test_a_malformed_step_option_raises_one_error_naming_the_option(value: object) -> None:
    with pytest.raises(MalformedStepAddress, match=f"option '{opt.STEP}' is not a step address") as raised:
        StepAddress.of(message_with({opt.STEP: value}))

    assert raised.value.option == opt.STEP
    assert isinstance(raised.value, MalformedMessage)  # dead-lettered as a malformed message


def test_logs_and_dead_letter_reasons_of_a_malformed_step_option_leave_the_step_out() -> None:
    message = message_with({opt.STEP: {"run": 1}})

    assert StepAddress.best_effort(message) is None
    assert (MessageContext.of(message).run_id, MessageContext.of(message).step) == (None, None)
    reason = reason_for(message, reason="malformed message", exception=None)
    assert (reason.run_id, reason.step, reason.actor) == (None, None, "charge")
