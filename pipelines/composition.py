"""Composition primitives: chain, fan-out, group, for-each and chord, nested freely.

A pipeline is a tree of three node kinds: a [`Step`][pipelines.composition.Step] (one actor call), a
[`Chain`][pipelines.composition.Chain] (children one after another, each receiving the previous result)
and a [`Parallel`][pipelines.composition.Parallel] (children at the same time, their results collected in
order). Everything else is a way to build those trees:

    chain(a, fan_out(b, c), d)                       # d gets [b_result, c_result]
    chord(for_each(resize, image_ids), then=step(publish_album, album_id))

The tree is data: starting it compiles a plan (``pipelines.flow.plan``) that the run store keeps, and
messages carry only their own step and arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Union, overload

import dramatiq
from typing_extensions import TypeVar

from pipelines.current import ConfiguredApp, configured_app
from pipelines.errors import DefinitionError

if TYPE_CHECKING:
    from pipelines.runs import Run

#: What a node's run returns: the last step's return type, for type checkers (``Run[R].result()``).
R = TypeVar("R", default=Any)
#: Anything that ends a pipeline with a result of type R.
Ending = Union["Node[R]", "dramatiq.Message[R]", "dramatiq.Actor[Any, R]"]


@dataclass(frozen=True)
class Node(Generic[R]):
    """Base of every pipeline node; a node can be started as a run on its own.

    ``R`` is the type of the node's result (the last step's return type), which type checkers carry
    from ``step(actor)`` through ``chain``/``chord`` to ``Run[R].result()``.
    """

    def run(self, *args: Any, **kwargs: Any) -> Run[R]:
        """Start a run of this node with the configured app; ``args``/``kwargs`` go to its first steps."""
        return self.run_with_options(args=args, kwargs=kwargs)

    def run_with_options(
        self,
        *,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        deadline_s: float | None = None,
        app: ConfiguredApp | None = None,
    ) -> Run[R]:
        """Start a run with options.

        Args:
            args: Positional arguments appended to the arguments of the first step(s).
            kwargs: Keyword arguments merged into those of the first step(s).
            idempotency_key: A second start with the same key returns the first run.
            name: Name recorded on the run (registered pipelines pass theirs).
            deadline_s: After this many seconds no further step starts and the run fails.
            app: The app to run on; defaults to the one ``pipelines.configure()`` set up.
        """
        target = app or configured_app()
        run: Run[R] = target.start(
            self, args=args, kwargs=kwargs, idempotency_key=idempotency_key, name=name, deadline_s=deadline_s
        )
        return run


@dataclass(frozen=True)
class Step(Node[R]):
    """One call of one actor, with the arguments bound when the pipeline was built."""

    actor_name: str
    queue_name: str = "default"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Chain(Node[R]):
    """Children run one after another; each receives the previous one's result as its last argument."""

    children: tuple[Node[Any], ...]


@dataclass(frozen=True)
class Parallel(Node[list[Any]]):
    """Children run at the same time; the node's result is the list of their results, in order.

    ``kind`` only records intent: ``fan_out`` (different actors, same input, one publish copied by the
    exchange) or ``group`` (usually one actor over many inputs, one message each).
    """

    children: tuple[Node[Any], ...]
    kind: Literal["fan_out", "group"] = "group"


def as_node(value: object) -> Node[Any]:
    """Turn a Dramatiq message or actor (or a node) into a pipeline node.

    Raises:
        DefinitionError: For anything else, naming what was given.
    """
    if isinstance(value, Node):
        return value
    if isinstance(value, dramatiq.Message):
        return Step(
            actor_name=value.actor_name,
            queue_name=value.queue_name,
            args=tuple(value.args),
            kwargs=dict(value.kwargs),
            options=dict(value.options),
        )
    if isinstance(value, dramatiq.Actor):
        return Step(actor_name=value.actor_name, queue_name=value.queue_name)
    raise DefinitionError(
        f"{value!r} is not a pipeline step. Use actor.message(...), an actor, or chain/fan_out/group/chord."
    )


def step(actor: dramatiq.Actor[Any, R], *args: Any, **kwargs: Any) -> Step[R]:
    """A step calling ``actor`` with these arguments first; the run adds the previous result after them.

    Unlike ``actor.message(...)``, it does not ask for every argument up front, so type checkers accept
    the partial call: ``step(make_thumbnail, 256)`` becomes ``make_thumbnail(256, image)``.
    """
    if not isinstance(actor, dramatiq.Actor):
        raise DefinitionError(f"step() takes an actor first, not {actor!r}.")
    return Step(actor_name=actor.actor_name, queue_name=actor.queue_name, args=args, kwargs=kwargs)


def _nodes(what: str, values: Iterable[object]) -> tuple[Node[Any], ...]:
    nodes = tuple(as_node(v) for v in values)
    if not nodes:
        raise DefinitionError(f"{what}() needs at least one step.")
    return nodes


@overload
def chain(s1: Ending[R], /) -> Chain[R]: ...
@overload
def chain(s1: object, s2: Ending[R], /) -> Chain[R]: ...
@overload
def chain(s1: object, s2: object, s3: Ending[R], /) -> Chain[R]: ...
@overload
def chain(s1: object, s2: object, s3: object, s4: Ending[R], /) -> Chain[R]: ...
@overload
def chain(s1: object, s2: object, s3: object, s4: object, s5: Ending[R], /) -> Chain[R]: ...
@overload
def chain(s1: object, s2: object, s3: object, s4: object, s5: object, s6: Ending[R], /) -> Chain[R]: ...
@overload
def chain(*steps: object) -> Chain[Any]: ...
def chain(*steps: object) -> Chain[Any]:
    """Run ``steps`` one after another, passing each result to the next step as its last argument.

    The chain's result is its last step's: type checkers see it for up to six steps.
    """
    flat: list[Node[Any]] = []
    for node in _nodes("chain", steps):
        flat.extend(node.children if isinstance(node, Chain) else (node,))
    return Chain(tuple(flat))


def fan_out(*branches: object) -> Parallel:
    """Give the same input to every branch at once; the result is the list of branch results.

    When the branches start with different actors, the whole fan-out is one publish that the work
    exchange copies to each branch's queue.
    """
    return Parallel(_nodes("fan_out", branches), kind="fan_out")


def group(*members: object) -> Parallel:
    """Run members (each with its own arguments) in parallel; the result is their results in order.

    Accepts the members as arguments or as one iterable: ``group(a.message(1), a.message(2))`` or
    ``group(a.message(i) for i in ids)``.
    """
    only = members[0] if len(members) == 1 else None
    if only is not None and not isinstance(only, Node | dramatiq.Message | dramatiq.Actor):
        if not isinstance(only, Iterable) or isinstance(only, str | bytes):
            raise DefinitionError(f"group() takes steps or one iterable of steps, not {only!r}.")
        members = tuple(only)
    return Parallel(_nodes("group", members), kind="group")


def for_each(actor: dramatiq.Actor[Any, Any], items: Iterable[Any]) -> Parallel:
    """Call ``actor`` once per item, in parallel: ``for_each(resize, ids)`` is ``group(resize.message(i) ...)``.

    Formerly ``map``, a name that shadowed the built-in (``pipelines.map`` still works, with a warning).
    """
    if not isinstance(actor, dramatiq.Actor):
        raise DefinitionError(f"for_each() takes an actor first, not {actor!r}.")
    steps = [step(actor, item) for item in items]
    if not steps:
        raise DefinitionError(f"for_each({actor.actor_name}, ...) needs at least one item.")
    return group(*steps)


def chord(members: object, then: Ending[R]) -> Chain[R]:
    """Run ``members`` in parallel, then ``then`` once with the list of all their results.

    ``members`` is a group/fan-out node or an iterable of steps.
    """
    header = members if isinstance(members, Parallel) else group(members)
    return Chain((header, as_node(then)))


def shape_name(node: Node) -> str:
    """A name for a run started without one (``app.start(node)``), from the actors it calls.

    ``charge`` for one actor, ``charge>ship`` for two, ``charge>...>notify`` for more (first and last,
    in plan order). Built from actor names only, never from how many members a group has, so it stays
    a small set of names per application (it is a metrics label).
    """
    actors: list[str] = []
    pending: list[Node] = [node]
    while pending:
        current = pending.pop(0)
        if isinstance(current, Step):
            if current.actor_name not in actors:
                actors.append(current.actor_name)
        elif isinstance(current, Chain | Parallel):
            pending[:0] = current.children
    if len(actors) <= 2:
        return ">".join(actors)
    return f"{actors[0]}>...>{actors[-1]}"
