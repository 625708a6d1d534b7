"""A run's first steps with the arguments each was started with, read back from what the store keeps.

A run built on the spot (``app.start(chain(step(charge, 41), ship))``) is given nothing as a whole: what
it was started with are its first steps' bound arguments (``41``), followed by whatever the start call
passed them. The store keeps both (``RunPlans.run_first_steps``), sealed when one of the first steps'
actors encrypts: then they stay sealed here too (the console and the CLI hold no keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from pipelines.flow.step_messages import StepInput, step_arguments
from pipelines.wire.steps import Leaf

#: What a run whose first steps' arguments are sealed has of them.
Sealed = Literal["sealed"]


@dataclass(frozen=True)
class FirstStep:
    """A step a run started with, and the arguments its message carried."""

    node: str
    actor: str
    args: list[Any]
    kwargs: dict[str, Any]


def first_steps(kept: tuple[str, str] | None) -> tuple[FirstStep, ...] | Sealed | None:
    """The first steps of ``kept`` (``RunPlans.run_first_steps``) with the arguments each received, in
    plan order; ``"sealed"`` when an actor of theirs encrypts, None when the run kept none."""
    if kept is None:
        return None
    leaves, given = (orjson.loads(text) for text in kept)
    if isinstance(leaves, dict) or isinstance(given, dict):  # a sealed value: only a worker opens it
        return "sealed"
    started_with = StepInput(tuple(given[0]), given[1])
    steps = []
    for leaf in (Leaf.from_json(data) for data in leaves):
        args, kwargs = step_arguments(leaf, started_with)  # as its message carried them
        steps.append(FirstStep(leaf.node, leaf.actor_name, list(args), kwargs))
    return tuple(steps)
