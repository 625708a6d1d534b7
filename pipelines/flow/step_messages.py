"""The messages that start a run's steps, and the check that the arguments fit them before any is sent.

What a step's message looks like (its arguments after the previous result, its step address, the
fan-out message that carries steps of several actors) is decided here, once: every way of starting
steps builds its messages with it — a run's start (:mod:`pipelines.flow.starting`), the next steps of
a run (:mod:`pipelines.flow.runtime`), a step run in the same worker (:mod:`pipelines.flow.local_steps`),
a stalled run's redrive (:mod:`pipelines.flow.stall_sweep`) — and a compiled plan checks the arguments
it is started with by the same rule (:mod:`pipelines.flow.compiled_plans`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dramatiq

from pipelines import options as opt
from pipelines.broker.common import PipelineBroker
from pipelines.errors import DefinitionError
from pipelines.wire.naming import MAX_NAME_BYTES, new_message_id
from pipelines.wire.steps import Leaf, StepAddress


@dataclass(frozen=True, slots=True)
class StepInput:
    """What every step started together receives after its own bound arguments."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None


def step_arguments(leaf: Leaf, given: StepInput) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments ``leaf``'s actor is called with: its bound ones, then what every step started with
    it receives (``given``), unless it ignores that (``pipe_ignore``)."""
    if leaf.options.get(opt.PIPE_IGNORE):
        return tuple(leaf.args), dict(leaf.kwargs)
    return (*leaf.args, *given.args), {**leaf.kwargs, **(given.kwargs or {})}


def step_messages(
    leaves: Sequence[Leaf], *, run_id: str, pipeline: str, given: StepInput
) -> list[dramatiq.Message[Any]]:
    """The messages that start ``leaves``: leaves of different actors share one fan-out message.

    A queue receives one copy of a publish, so two leaves of the same actor (a ``map``) need two
    messages; leaves of different actors are packed into as few messages as routing-key length allows.
    """
    bins: list[list[Leaf]] = []
    key_bytes: list[int] = []
    next_bin: dict[str, int] = {}
    for leaf in leaves:
        size = len(leaf.actor_name.encode()) + 1
        index = next_bin.get(leaf.actor_name, 0)
        while index < len(bins) and key_bytes[index] + size > MAX_NAME_BYTES + 1:
            index += 1
        if index == len(bins):
            bins.append([])
            key_bytes.append(0)
        bins[index].append(leaf)
        key_bytes[index] += size
        next_bin[leaf.actor_name] = index + 1
    return [_message(group, run_id, pipeline, given) for group in bins]


def _step_options(leaf: Leaf, run_id: str) -> dict[str, Any]:
    return {**leaf.options, opt.STEP: StepAddress(run_id, leaf.node, leaf.up).to_option()}


def _message(leaves: list[Leaf], run_id: str, pipeline: str, given: StepInput) -> dramatiq.Message[Any]:
    shared_kwargs = dict(given.kwargs or {})
    if len(leaves) == 1:
        leaf = leaves[0]
        args, kwargs = step_arguments(leaf, given)
        return dramatiq.Message(
            queue_name=leaf.queue_name,
            actor_name=leaf.actor_name,
            args=args,
            kwargs=kwargs,
            options={**_step_options(leaf, run_id), opt.PIPELINE: pipeline},
            message_id=new_message_id(),
        )
    branches = {
        leaf.actor_name: {
            "args": list(leaf.args),
            "kwargs": dict(leaf.kwargs),
            "options": _step_options(leaf, run_id),
        }
        for leaf in leaves
    }
    return dramatiq.Message(
        queue_name="",
        actor_name="",
        args=given.args,
        kwargs=shared_kwargs,
        options={opt.BRANCHES: branches, opt.PIPELINE: pipeline},
        message_id=new_message_id(),
    )


@functools.lru_cache(maxsize=1024)
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """An actor function's signature, read once (``inspect.signature`` costs more than the whole check)."""
    return inspect.signature(fn)


def _check_arguments(broker: PipelineBroker, leaves: Sequence[Leaf], given: StepInput) -> None:
    """Refuse to start a run whose steps would be called with arguments their actor does not take.

    Raises:
        DefinitionError: Naming the step, the actor and Python's reason.
    """
    checked: set[tuple[str, int, frozenset[str]]] = set()
    for leaf in leaves:
        args, kwargs = step_arguments(leaf, given)
        shape = (leaf.actor_name, len(args), frozenset(kwargs))
        if shape in checked:
            continue
        checked.add(shape)
        try:
            _signature(broker.actors[leaf.actor_name].fn).bind(*args, **kwargs)
        except TypeError as e:
            raise DefinitionError(
                f"Arguments do not fit step {leaf.node} ({leaf.actor_name}): {e}. Steps after the first also "
                "receive the previous result as their last argument (or set pipe_ignore=True)."
            ) from None
