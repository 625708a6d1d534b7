"""A run's shape drawn back from its step ids and chain continuations, as the store keeps them."""

from __future__ import annotations

from pipelines.composition import Node, chain, chord, fan_out, group
from pipelines.composition import Step as S
from pipelines.console.shape import ShapeNode, build_shape, is_parallel
from pipelines.flow.plan import compile_plan


def shape_of(node: Node, *, fold_at: int = 50, failed: tuple[str, ...] = ()) -> ShapeNode[str]:
    plan = compile_plan(node)
    steps = [(leaf.node, leaf.actor_name, leaf.actor_name) for leaf in plan.leaves]
    states = {leaf.node: "failed" if leaf.node in failed else "succeeded" for leaf in plan.leaves}
    return build_shape(steps, set(plan.starts), fold_at=fold_at, state_of=states)


def outline(node: ShapeNode[str]) -> object:
    if node.kind == "step":
        return node.step
    return (node.kind, [outline(child) for child in node.children])


def test_chains_fan_outs_groups_and_chords_are_told_apart() -> None:
    pipeline = chain(S("a"), fan_out(S("b"), S("c")), chord(group(S("d"), S("d")), then=S("e")), S("f"))

    assert outline(shape_of(pipeline)) == (
        "chain",
        ["a", ("fan-out", ["b", "c"]), ("group", ["d", "d"]), "e", "f"],
    )


def test_a_chord_at_the_root_and_nested_branches() -> None:
    assert outline(shape_of(chord(group(S("m"), S("m"), S("m")), then=S("cb")))) == (
        "chord",
        [("group", ["m", "m", "m"]), "cb"],
    )
    nested = fan_out(chain(S("a"), S("b")), chain(S("c"), chord(fan_out(S("x"), S("y")), then=S("z"))))
    assert outline(shape_of(nested)) == (
        "fan-out",
        [("chain", ["a", "b"]), ("chain", ["c", ("fan-out", ["x", "y"]), "z"])],
    )
    assert outline(shape_of(S("alone"))) == ("chain", ["alone"])


def test_many_members_fold_keeping_the_ones_that_need_attention_in_view() -> None:
    members = group(S("m") for _ in range(100))
    shape = shape_of(chord(members, then=S("cb")), fold_at=5, failed=("0.0.42", "0.0.97"))
    folded = shape.children[0]

    assert [child.node for child in folded.children] == ["0.0.0", "0.0.1", "0.0.2", "0.0.42", "0.0.97"]
    assert folded.size == 100
    assert folded.folded is not None
    assert (folded.folded.count, dict(folded.folded.by_state)) == (95, {"succeeded": 95})
    assert len(folded.steps) == 100


def test_a_node_is_parallel_when_none_of_its_children_continues_a_chain() -> None:
    plan = compile_plan(chain(S("a"), fan_out(S("b"), S("c"))))
    ids = [leaf.node for leaf in plan.leaves]

    assert is_parallel("0.1", ids, set(plan.starts))
    assert not is_parallel("0", ids, set(plan.starts))
