"""Registered pipelines started by name: a factory built from the run's arguments, and a run re-run.

A run started by a registered name keeps its input (the arguments as given) and that it was
registered, so it can be started again by that name. A run built on the spot is not re-run: its plan
may hold values its caller computed, and nothing says they still hold.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from pipelines.composition import Node
from pipelines.errors import CannotRerun, ConfigError, DefinitionError, UnknownPipeline
from pipelines.flow.step_messages import StepInput
from pipelines.payloads.sealing import SEALED_KEY, Opening, Sealer
from pipelines.store.base import RunStatus
from pipelines.store.roles import RunViews


def built(
    name: str, entry: Node | Callable[..., Node], args: tuple[Any, ...], kwargs: Mapping[str, Any] | None
) -> tuple[Node, tuple[Any, ...], Mapping[str, Any] | None]:
    """The pipeline registered as ``name`` and what its first steps receive: a factory is called with
    the arguments (its first steps then receive none).

    Raises:
        DefinitionError: The arguments do not fit the factory, or it raised on them.
    """
    if isinstance(entry, Node):
        return entry, args, kwargs
    try:
        inspect.signature(entry).bind(*args, **(kwargs or {}))
    except TypeError as e:
        raise DefinitionError(f"Arguments do not fit pipeline {name!r}: {e}.") from None
    try:
        return entry(*args, **(kwargs or {})), (), None
    except Exception as e:  # a factory refusing its arguments: bad input, told in one line
        raise DefinitionError(f"Pipeline {name!r} cannot be built from {kwargs or args}: {e!r}.") from None


def unknown_pipeline(
    name: str, registered: Iterable[str], *, actors: str | None = None, loading: ConfigError | None = None
) -> UnknownPipeline:
    """The error for ``name`` registered nowhere: ``actors`` is the ``[app] actors`` module where
    it could be, ``loading`` the error that stopped the ``[app]`` modules from loading."""
    known = ", ".join(sorted(registered)) or "none"
    if loading is not None:
        return UnknownPipeline(
            f"No pipeline is registered as {name!r} (registered: {known}), and loading the [app] "
            f"modules to look for it failed: {loading}"
        )
    return UnknownPipeline(
        f"No pipeline is registered as {name!r} (registered: {known}). Register it with "
        f"app.register({name!r}, ...) in {actors!r} (app.actors), or name a mapping "
        "of pipelines in app.pipelines."
    )


def rerun_input(status: RunStatus, sealer: Sealer | None) -> StepInput:
    """The arguments to start ``status``'s pipeline again with: its input, opened when sealed.

    Raises:
        CannotRerun: The run has not ended, was built on the spot, kept no input, or holds a sealed
            input and ``sealer`` is None.
        Unsealable: The sealed input does not open with the keys.
    """
    run_id = status.run_id
    if not status.is_final:
        raise CannotRerun(f"Run {run_id} is {status.state}: only a run that has ended can be re-run.")
    if not status.registered:
        raise CannotRerun(f"Run {run_id} was built on the spot: only registered pipelines can be re-run.")
    if status.input_json is None:
        raise CannotRerun(f"Run {run_id} kept no input (an older version started it): start it anew.")
    given = orjson.loads(status.input_json)
    if isinstance(given, dict) and SEALED_KEY in given:
        if sealer is None:
            raise CannotRerun(f"Run {run_id} has a sealed input and [encryption] keys is empty: set them to re-run it.")
        given = sealer.open_sealed(given, Opening(run=run_id))
    args, kwargs = given
    return StepInput(tuple(args), kwargs)


def linked(store: RunViews, run_id: str, on_created: Callable[[str, bool], None] | None) -> Callable[[str, bool], None]:
    """``on_created`` for a re-run of ``run_id``: the original is linked to the re-run first, before its
    first steps are published (a store that cannot link it fails the re-run, which then never starts)."""

    def created(rerun_id: str, new: bool) -> None:
        store.link_rerun(run_id, rerun_id)
        if on_created is not None:
            on_created(rerun_id, new)

    return created
