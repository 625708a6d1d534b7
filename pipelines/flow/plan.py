"""Compiling a pipeline tree into the flat plan a run executes.

Each step becomes a :class:`~pipelines.wire.steps.Leaf` with its id and its ancestors' frames; the
arguments of steps that start later are stored with the run, not carried along.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from pipelines.composition import Chain, Node, Parallel, Step
from pipelines.errors import DefinitionError
from pipelines.wire.steps import MAX_STEP_ID_CHARS, ROOT, Frame, Leaf


@dataclass(frozen=True)
class Plan:
    """What the run store keeps for a run, and what the producer publishes first."""

    leaves: tuple[Leaf, ...]
    entry: tuple[Leaf, ...]
    starts: Mapping[str, tuple[Leaf, ...]]


def compile_plan(root: Node) -> Plan:
    """Flatten ``root`` into leaves with ancestor frames, its entry steps and its chain continuations."""
    tree = root if isinstance(root, Chain | Parallel) else Chain((root,))
    leaves = list(_walk(tree, ROOT, ()))
    deepest = max(leaves, key=lambda leaf: len(leaf.node))
    if len(deepest.node) > MAX_STEP_ID_CHARS:
        raise DefinitionError(
            f"This pipeline nests too deep: step id {deepest.node[:40]}... is over {MAX_STEP_ID_CHARS} characters. "
            "Flatten nested chains and groups (a chain of chains is one chain)."
        )
    by_id = {leaf.node: leaf for leaf in leaves}
    starts: dict[str, tuple[Leaf, ...]] = {}
    _collect_starts(tree, ROOT, by_id, starts)
    return Plan(tuple(leaves), tuple(_entries(tree, ROOT, by_id)), starts)


def _walk(node: Node, node_id: str, up: tuple[Frame, ...]) -> Iterator[Leaf]:
    if isinstance(node, Step):
        yield Leaf(node_id, node.actor_name, node.queue_name, node.args, node.kwargs, node.options, up)
        return
    assert isinstance(node, Chain | Parallel)
    kind: Literal["c", "p"] = "c" if isinstance(node, Chain) else "p"
    for index, child in enumerate(node.children):
        frame = Frame(kind, node_id, index, len(node.children))
        yield from _walk(child, f"{node_id}.{index}", (frame, *up))


def _entries(node: Node, node_id: str, by_id: Mapping[str, Leaf]) -> Iterator[Leaf]:
    """The steps that start when ``node`` starts."""
    if isinstance(node, Step):
        yield by_id[node_id]
    elif isinstance(node, Chain):
        yield from _entries(node.children[0], f"{node_id}.0", by_id)
    else:
        assert isinstance(node, Parallel)
        for index, child in enumerate(node.children):
            yield from _entries(child, f"{node_id}.{index}", by_id)


def _collect_starts(node: Node, node_id: str, by_id: Mapping[str, Leaf], starts: dict[str, tuple[Leaf, ...]]) -> None:
    if isinstance(node, Step):
        return
    assert isinstance(node, Chain | Parallel)
    for index, child in enumerate(node.children):
        child_id = f"{node_id}.{index}"
        if isinstance(node, Chain) and index > 0:
            starts[child_id] = tuple(_entries(child, child_id, by_id))
        _collect_starts(child, child_id, by_id, starts)
