"""A pipeline compiled once for all the runs that start it.

Starting a run compiles its pipeline into a plan, checks that its actors exist and take the arguments
their steps will get, and serializes the chain continuations the run store keeps: before this cache,
as much of a start's CPU as storing the run. A node started again (a registered pipeline, or one a
producer keeps) gives the same plan, so the compiled form is kept on the node itself. The checks are
remembered per broker for the actors they were made against (an actor declared again is checked
again) and, for the first steps, per shape of the run's arguments. Continuations are serialized once,
unless their bound arguments hold something a caller could change between two starts (a list, a
dict): those are serialized for each run, as they are at that moment.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import dramatiq
import orjson

from pipelines.broker.common import PipelineBroker
from pipelines.composition import Node
from pipelines.errors import UnknownActor
from pipelines.flow.plan import Plan, compile_plan
from pipelines.flow.step_messages import StepInput, _check_arguments
from pipelines.wire.steps import Leaf, frames_json

#: The attribute of a node that holds its compiled plan (nodes are frozen: set with object.__setattr__).
_ATTRIBUTE = "_compiled_plan"
#: Values that cannot change once a pipeline is built: their JSON can be kept.
_FROZEN = (str, int, float, bool, type(None))

#: A run's arguments as far as checking them goes: how many positional ones, which keywords.
Shape = tuple[int, frozenset[str]]


def _is_frozen(value: Any) -> bool:
    if isinstance(value, _FROZEN):
        return True
    return isinstance(value, tuple) and all(_is_frozen(item) for item in value)


def _leaves_frozen(leaves: Sequence[Leaf]) -> bool:
    return all(_is_frozen(leaf.args) and _is_frozen((*leaf.kwargs.values(), *leaf.options.values())) for leaf in leaves)


def _starts_json(plan: Plan) -> dict[str, str]:
    return {node: orjson.dumps([leaf.to_json() for leaf in leaves]).decode() for node, leaves in plan.starts.items()}


@dataclass
class _Checked:
    """What was checked against one broker: for these actors, these shapes of the first steps' arguments."""

    actors: tuple[dramatiq.Actor[Any, Any] | None, ...]
    shapes: set[Shape] = field(default_factory=set)


class CompiledPlan:
    """A node's plan and what every run of it stores, computed once (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.steps = [(leaf.node, leaf.actor_name) for leaf in plan.leaves]
        self.frames = {leaf.node: frames_json(leaf.up) for leaf in plan.leaves}
        """(step id, actor name) of every step, in plan order."""
        self.entries = {node: [leaf.node for leaf in leaves] for node, leaves in plan.starts.items()}
        """Chain continuations: step id → ids of the leaves that start there."""
        self._continuations = [leaf for leaves in plan.starts.values() for leaf in leaves]
        self._starts_json = _starts_json(plan) if _leaves_frozen(self._continuations) else None
        self._actor_names = tuple(dict.fromkeys(leaf.actor_name for leaf in plan.leaves))
        self._checked: weakref.WeakKeyDictionary[PipelineBroker, _Checked] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def starts_json(self) -> Mapping[str, str]:
        """Chain continuations: step id → JSON list of the leaves that start there."""
        return self._starts_json if self._starts_json is not None else _starts_json(self.plan)

    def check(self, broker: PipelineBroker, given: StepInput) -> None:
        """Refuse a run whose actors ``broker`` does not know, or whose steps would not take their arguments.

        Raises:
            UnknownActor: A step names an actor the broker does not know.
            DefinitionError: A step's actor does not take the arguments it would be called with.
        """
        actors = tuple(broker.actors.get(name) for name in self._actor_names)
        shape: Shape = (len(given.args), frozenset(given.kwargs or ()))
        checked = self._checked.get(broker)
        if checked is not None and shape in checked.shapes and _same(checked.actors, actors):
            return
        if checked is None or not _same(checked.actors, actors):
            self._check_actors(broker, actors)
            checked = _Checked(actors)
        _check_arguments(broker, self.plan.entry, given)
        checked.shapes.add(shape)
        with self._lock:
            self._checked[broker] = checked

    def _check_actors(self, broker: PipelineBroker, actors: tuple[dramatiq.Actor[Any, Any] | None, ...]) -> None:
        unknown = sorted(name for name, actor in zip(self._actor_names, actors, strict=True) if actor is None)
        elsewhere = _declared_elsewhere(broker, unknown) if unknown else []
        if elsewhere:
            raise UnknownActor(
                f"Actor(s) {', '.join(elsewhere)} are declared, but on another broker than this app's: "
                "they were declared before pipelines.configure() ran (@dramatiq.actor without broker= takes "
                "the broker Dramatiq has at that moment). Call pipelines.configure() before the actors are "
                "declared (at the top of their module, or before importing it), or pass broker=app.broker."
            )
        if unknown:
            raise UnknownActor(
                f"Unknown actor(s) {', '.join(map(repr, unknown))}: no such actor is declared on this broker. "
                "Import the module that defines them before starting the pipeline."
            )
        _check_arguments(broker, self._continuations, StepInput((None,)))


def _declared_elsewhere(broker: PipelineBroker, names: Sequence[str]) -> list[str]:
    """Of ``names``, the actors a loaded module declares on another broker, as ``'name' (module.attribute)``.

    Read only when a start is refused: it walks every module's globals.
    """
    found = []
    for module_name, module in list(sys.modules.items()):
        for attribute, value in list(vars(module).items()):
            if (
                isinstance(value, dramatiq.Actor)
                and value.actor_name in names
                and value.broker is not cast(Any, broker)
            ):
                found.append(f"{value.actor_name!r} ({module_name}.{attribute})")
    return sorted(set(found))


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def compiled_plan(node: Node) -> CompiledPlan:
    """``node``'s compiled plan, compiled on its first start and kept on it."""
    compiled: CompiledPlan | None = node.__dict__.get(_ATTRIBUTE)
    if compiled is None:
        compiled = CompiledPlan(compile_plan(node))
        object.__setattr__(node, _ATTRIBUTE, compiled)  # frozen dataclass; not a field, so not compared
    return compiled
