"""Compiling a pipeline tree into the flat plan a run executes.

Each step (leaf) gets an id that is its path in the tree (``"1.0"`` is the first child of the second
child of the root) and the list of its ancestors, nearest first, as :class:`Frame` s. That list is all
a worker needs to advance the run when the step ends: walk up, continue a chain, or count a member in a
parallel barrier. The arguments of steps that start later are stored with the run, not carried along.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pipelines.composition import Chain, Node, Parallel, Step

#: The id of the root node; every other id extends it.
ROOT = "0"


@dataclass(frozen=True, slots=True)
class Frame:
    """An ancestor of a step: its kind, id, the position of the step's branch in it, and its size."""

    kind: Literal["c", "p"]
    node: str
    index: int
    count: int

    def to_json(self) -> list[Any]:
        return [self.kind, self.node, self.index, self.count]

    @classmethod
    def from_json(cls, data: list[Any]) -> Frame:
        kind, node, index, count = data
        if kind not in ("c", "p"):
            raise ValueError(f"unknown frame kind {kind!r}")
        return cls(kind, str(node), int(index), int(count))


@dataclass(frozen=True, slots=True)
class Leaf:
    """A step of a compiled plan: which actor, with which bound arguments, and where it sits."""

    node: str
    actor_name: str
    queue_name: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]
    up: tuple[Frame, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "actor": self.actor_name,
            "queue": self.queue_name,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "options": dict(self.options),
            "up": [f.to_json() for f in self.up],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Leaf:
        return cls(
            node=data["node"],
            actor_name=data["actor"],
            queue_name=data["queue"],
            args=tuple(data["args"]),
            kwargs=data["kwargs"],
            options=data["options"],
            up=tuple(Frame.from_json(f) for f in data["up"]),
        )


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
