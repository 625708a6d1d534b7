"""Where a step sits in its run, as messages carry it and the run store keeps it.

Each step (leaf) of a compiled plan (``pipelines.flow.plan``) has an id that is its path in the tree
(``"1.0"`` is the first child of the second child of the root) and the list of its ancestors, nearest
first, as :class:`Frame` s. That list is all a worker needs to advance the run when the step ends: walk
up, continue a chain, or count a member in a parallel barrier.

A step's message carries its :class:`StepAddress` (run, step id, frames) in the ``pipeline_step``
option; this module is the one place that writes and parses that wire format. It imports nothing of
the composition or the app, so the store, the broker and the middleware can use it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson

from pipelines import options as opt
from pipelines.wire.codec import MalformedMessage

if TYPE_CHECKING:
    import dramatiq

#: The id of the root node; every other id extends it.
ROOT = "0"
#: The longest step id a message may carry (a plan nested deeper is refused when it is defined).
MAX_STEP_ID_CHARS = 1000
_STEP_ID = re.compile(r"0(?:\.(?:0|[1-9][0-9]*))*")


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
        """A frame as a message carries it; nothing is converted: a wrong type or range is refused.

        Raises:
            ValueError: It is not ``[kind, node, index, count]`` with ``0 <= index < count``.
        """
        if not isinstance(data, list | tuple) or len(data) != 4:
            raise ValueError(f"a frame is a list of four items, not {data!r:.100}")
        kind, node, index, count = data
        if kind not in ("c", "p"):
            raise ValueError(f"unknown frame kind {kind!r:.50}")
        if not _is_step_id(node):
            raise ValueError(f"a frame's node is a step id such as '0.1', not {node!r:.100}")
        if not (_is_int(index) and _is_int(count) and 0 <= index < count):
            raise ValueError(
                f"a frame's index and count are integers with 0 <= index < count, not {index!r:.50}, {count!r:.50}"
            )
        return cls(kind, node, index, count)


def released_under(up: Iterable[Frame]) -> str:
    """Under which id a step with these ancestors is released: :data:`ROOT` for a run's first steps, else
    the chain continuation whose entries list it (released when the step before it ends). A step runs or
    ends only once its run released that id: a message for it before then is not one its run sent."""
    for frame in up:
        if frame.kind == "c" and frame.index > 0:
            return f"{frame.node}.{frame.index}"
    return ROOT


def frames_json(up: Iterable[Frame]) -> str:
    """A step's ancestors as the run store keeps them and compares them with a message's: one spelling."""
    return orjson.dumps([f.to_json() for f in up]).decode()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_step_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_STEP_ID_CHARS and _STEP_ID.fullmatch(value) is not None


#: Each thread's last two ``pipeline_step`` options parsed or made, with their addresses (see
#: :meth:`StepAddress.of`).
_parsed = threading.local()


class MalformedStepAddress(MalformedMessage):
    """A message's ``pipeline_step`` option is not a step address; ``option`` names the option."""

    def __init__(self, value: object, why: str) -> None:
        super().__init__(f"option {opt.STEP!r} is not a step address ({why}): {value!r:.200}")
        self.option = opt.STEP


class AddressNotInPlan(MalformedMessage):
    """A step message whose address or actor does not match its run's stored plan: it is not run, and
    it cannot advance the run (a tampered or foreign message)."""

    def __init__(self, run_id: str, node: str, why: str) -> None:
        super().__init__(f"step {node!r:.100} of run {run_id!r:.100} does not match the run's plan: {why}")
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
        if not (isinstance(run_id, str) and run_id and len(run_id) <= MAX_STEP_ID_CHARS):
            raise MalformedStepAddress(value, "'run' must be a non-empty string")
        if not (isinstance(node, str) and _is_step_id(node)):
            raise MalformedStepAddress(value, "'node' must be a step id such as '0.1'")
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
        # identity match is the very value parsed (option values are never changed in place). It keeps two:
        # a local step's is noted (``remember``) while the hooks of the step before it still read theirs.
        cached = _parsed.__dict__
        known: StepAddress | None = (
            cached["address"]
            if cached.get("value") is value
            else cached["earlier_address"]
            if cached.get("earlier") is value
            else None
        )
        if known is not None:
            return known
        address = cls.from_option(value)
        address.remember(value)
        return address

    def remember(self, value: object) -> None:
        """Note that ``value``, a ``pipeline_step`` option this thread made with :meth:`to_option` (a local
        step's) or parsed, is this address: :meth:`of` need not parse it again."""
        cached = _parsed.__dict__
        if cached.get("value") is value:
            return
        cached["earlier"], cached["earlier_address"] = cached.get("value"), cached.get("address")
        cached["value"], cached["address"] = value, self

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
