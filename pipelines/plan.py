"""Compiling a pipeline tree into the flat plan a run executes.

Each step (leaf) gets an id that is its path in the tree (``"1.0"`` is the first child of the second
child of the root) and the list of its ancestors, nearest first, as :class:`Frame` s. That list is all
a worker needs to advance the run when the step ends: walk up, continue a chain, or count a member in a
parallel barrier. The arguments of steps that start later are stored with the run, not carried along.

A step's message carries its :class:`StepAddress` (run, step id, frames) in the ``pipeline_step``
option; this module is the one place that writes and parses that wire format.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pipelines import options as opt
from pipelines.codec import MalformedMessage
from pipelines.composition import Chain, Node, Parallel, Step

if TYPE_CHECKING:
    import dramatiq

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
        if not isinstance(data, list | tuple) or len(data) != 4:
            raise ValueError(f"a frame is a list of four items, not {data!r:.100}")
        kind, node, index, count = data
        if kind not in ("c", "p"):
            raise ValueError(f"unknown frame kind {kind!r}")
        return cls(kind, str(node), int(index), int(count))


#: Each thread's last parsed ``pipeline_step`` option and its address (see :meth:`StepAddress.of`).
_last_parsed = threading.local()


class MalformedStepAddress(MalformedMessage):
    """A message's ``pipeline_step`` option is not a step address; ``option`` names the option."""

    def __init__(self, value: object, why: str) -> None:
        super().__init__(f"option {opt.STEP!r} is not a step address ({why}): {value!r:.200}")
        self.option = opt.STEP


@dataclass(frozen=True, slots=True)
class StepAddress:
    """Where a step message belongs: its run, its step id and its ancestors, nearest first."""

    run_id: str
    node: str
    up: tuple[Frame, ...]

    def to_option(self) -> dict[str, Any]:
        """The value of the ``pipeline_step`` option (JSON)."""
        return {"run": self.run_id, "node": self.node, "up": [f.to_json() for f in self.up]}

    @classmethod
    def from_option(cls, value: object) -> StepAddress:
        """Parse the value of a ``pipeline_step`` option.

        Raises:
            MalformedStepAddress: It is not ``{"run": str, "node": str, "up": [frame, ...]}``.
        """
        if not isinstance(value, dict):
            raise MalformedStepAddress(value, "not an object")
        run_id, node, up = value.get("run"), value.get("node"), value.get("up")
        if not (isinstance(run_id, str) and run_id and isinstance(node, str) and node):
            raise MalformedStepAddress(value, "'run' and 'node' must be non-empty strings")
        if not isinstance(up, list):
            raise MalformedStepAddress(value, "'up' must be a list of frames")
        try:
            frames = tuple(map(Frame.from_json, up))
        except (TypeError, ValueError) as e:
            raise MalformedStepAddress(value, str(e)) from None
        return cls(run_id, node, frames)

    @classmethod
    def of(cls, message: dramatiq.Message[Any] | dramatiq.broker.MessageProxy) -> StepAddress | None:
        """The address in a message's options, or None for a message that is not a pipeline step.

        Raises:
            MalformedStepAddress: The option is there but is not a step address.
        """
        value = message.options.get(opt.STEP)
        if value is None:
            return None
        # Screening, the leases, the steps' middleware and the log context each read the address of the
        # message a thread handles: it is parsed once. The cache holds the option's object itself, so an
        # identity match is the very value parsed (option values are never changed in place).
        last = _last_parsed.__dict__
        if last.get("value") is value:
            address: StepAddress = last["address"]
            return address
        address = cls.from_option(value)
        last["value"], last["address"] = value, address
        return address

    @classmethod
    def best_effort(cls, message: dramatiq.Message[Any] | dramatiq.broker.MessageProxy) -> StepAddress | None:
        """The address for log lines, spans and dead-letter reasons, which must not fail on a bad
        message: None when the option is missing or malformed."""
        try:
            return cls.of(message)
        except MalformedStepAddress:
            return None


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
