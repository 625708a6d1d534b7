"""A run's shape, drawn back from what the run store keeps: its step ids and where its chains continue.

A step id is the step's path in the pipeline tree (``pipelines.wire.steps``), so every proper prefix of a
step id is a chain or a parallel node. The store keeps the chain continuations (``:starts``): a node
whose second child is a continuation is a chain; any other node with several children is parallel.
A chain whose first child is parallel is a chord (members, then the callback). A parallel node whose
members are single steps of one actor is a group (``for_each``); one of several actors, a fan-out.

Parallel nodes with many members are folded: the members worth a look (failed, retrying, running)
are kept first, the rest are counted by state.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from pipelines.wire.steps import ROOT

#: Order in which folded members are kept in view: the ones an operator looks for first.
ATTENTION = ("failed", "retrying", "running", "pending", "skipped", "succeeded")

S = TypeVar("S")

NodeKind = Literal["step", "chain", "chord", "fan-out", "group"]


@dataclass(frozen=True)
class Folded:
    """Members of a parallel node left out of view, counted by state."""

    count: int
    by_state: Mapping[str, int]


@dataclass(frozen=True)
class ShapeNode(Generic[S]):
    """A node of a run's tree: a step (with what ``S`` says of it) or a chain, chord, fan-out or group."""

    node: str
    kind: NodeKind
    step: S | None = None
    children: tuple[ShapeNode[S], ...] = ()
    size: int = 0
    """How many children the node has (some may be folded)."""
    folded: Folded | None = None
    index: int = 0
    """The node's position in its parent."""
    parent_kind: NodeKind | None = None
    steps: tuple[S, ...] = field(default=(), repr=False)
    """Every step below the node (for counts), in plan order."""


def _parent(node: str) -> str:
    return node.rsplit(".", 1)[0]


def build_shape(
    steps: Sequence[tuple[str, str, S]],
    continuations: Collection[str],
    *,
    fold_at: int,
    expand: Collection[str] = (),
    state_of: Mapping[str, str] | None = None,
) -> ShapeNode[S]:
    """The run's tree from its steps ((step id, actor, what to carry), in plan order) and continuations.

    Args:
        steps: Every step of the run.
        continuations: Step or node ids where a chain continues (the store's ``:starts`` keys).
        fold_at: A parallel node with more members than this shows only ``fold_at`` of them.
        expand: Ids of parallel nodes shown unfolded (up to ten times ``fold_at``).
        state_of: Step id → state, to choose which members stay in view and count the folded ones.
    """
    children: dict[str, list[str]] = {}
    leaves = {node: (actor, carried) for node, actor, carried in steps}
    for node in leaves:
        path = node
        while path != ROOT and "." in path:
            parent = _parent(path)
            siblings = children.setdefault(parent, [])
            if path not in siblings:
                siblings.append(path)
            path = parent
    for siblings in children.values():
        siblings.sort(key=lambda n: int(n.rsplit(".", 1)[1]))
    states = state_of or {}

    def kind_of(node: str) -> NodeKind:
        if node in leaves:
            return "step"
        kids = children.get(node, [])
        if len(kids) < 2 or any(kid in continuations for kid in kids[1:]):
            first = kids[0] if kids else ""
            return (
                "chord" if len(kids) > 1 and first not in leaves and kind_of(first) in ("fan-out", "group") else "chain"
            )
        actors = {leaves[kid][0] for kid in kids if kid in leaves}
        return "group" if len(actors) == 1 and all(kid in leaves for kid in kids) else "fan-out"

    def under(node: str) -> list[str]:
        if node in leaves:
            return [node]
        return [leaf for kid in children.get(node, []) for leaf in under(kid)]

    def make(node: str, index: int, parent_kind: NodeKind | None) -> ShapeNode[S]:
        kind = kind_of(node)
        if kind == "step":
            return ShapeNode(node, kind, step=leaves[node][1], index=index, parent_kind=parent_kind)
        kids = children.get(node, [])
        shown, folded = kids, None
        limit = fold_at * 10 if node in expand else fold_at
        if kind in ("fan-out", "group") and len(kids) > limit:
            shown, folded = _fold(kids, limit, under, states)
        return ShapeNode(
            node,
            kind,
            children=tuple(make(kid, int(kid.rsplit(".", 1)[1]), kind) for kid in shown),
            size=len(kids),
            folded=folded,
            index=index,
            parent_kind=parent_kind,
            steps=tuple(leaves[leaf][1] for leaf in under(node)),
        )

    return make(ROOT, 0, None)


def is_parallel(node: str, step_ids: Collection[str], continuations: Collection[str]) -> bool:
    """Whether ``node`` (not a step) is a parallel node: several children, none a chain continuation."""
    prefix = node + "."
    kids = {prefix + rest.split(".", 1)[0] for rest in (s[len(prefix) :] for s in step_ids if s.startswith(prefix))}
    return len(kids) > 1 and not kids & set(continuations)


def _fold(
    kids: list[str], limit: int, under: Callable[[str], list[str]], states: Mapping[str, str]
) -> tuple[list[str], Folded]:
    """Keep ``limit`` members, those needing attention first (in plan order); count the rest by state."""

    def rank(kid: str) -> int:
        leaf_states = [states.get(leaf, "pending") for leaf in under(kid)]
        return min((ATTENTION.index(s) if s in ATTENTION else len(ATTENTION)) for s in leaf_states or ["pending"])

    ranked = sorted(range(len(kids)), key=lambda i: (rank(kids[i]), i))
    keep = sorted(ranked[:limit])
    hidden = ranked[limit:]
    by_state: dict[str, int] = {}
    for i in hidden:
        for leaf in under(kids[i]):
            state = states.get(leaf, "pending")
            by_state[state] = by_state.get(state, 0) + 1
    return [kids[i] for i in keep], Folded(len(hidden), dict(sorted(by_state.items(), key=lambda kv: -kv[1])))
