"""What the run store keeps of a new run's steps, and why each is kept as it is.

A run's record holds the chain continuations (the steps a completion publishes next) and the first
steps with what they receive (what the stall sweep publishes again when nothing advanced a run). An
actor that marks arguments secret gets them sealed here too: sealed values travel in its messages,
and must never rest in the store in the clear.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import orjson

from pipelines.broker.common import PipelineBroker
from pipelines.errors import DefinitionError
from pipelines.flow.compiled_plans import CompiledPlan
from pipelines.flow.step_messages import StepInput
from pipelines.payloads.sealing import SealedFor, Sealer, encrypts
from pipelines.wire.codec import encode_value
from pipelines.wire.steps import Leaf


def stored_starts(broker: PipelineBroker, compiled: CompiledPlan, sealer: Sealer | None) -> Mapping[str, str]:
    """Chain continuations as the run store keeps them (step id → JSON list of leaves): computed once per
    pipeline, unless one of their actors encrypts (then sealed for each run)."""
    starts = compiled.plan.starts
    if sealer is None or not any(_encrypts(broker, leaf) for leaves in starts.values() for leaf in leaves):
        return compiled.starts_json()
    return {
        node: orjson.dumps([_sealed(broker, leaf, sealer).to_json() for leaf in leaves]).decode()
        for node, leaves in starts.items()
    }


def first_steps_kept(
    broker: PipelineBroker, entry: Sequence[Leaf], given: StepInput, sealer: Sealer | None, run_id: str
) -> tuple[str, str] | None:
    """The first steps and what they receive, as JSON, both sealed for run ``run_id`` when one of their
    actors encrypts.
    None for arguments that are not JSON, which the publish refuses with the reason."""
    try:
        leaves = encode_value([leaf.to_json() for leaf in entry])
    except DefinitionError:
        return None
    received = input_kept(broker, entry, given, sealer, run_id)
    if received is None:
        return None
    return _sealed_json(broker, entry, leaves, sealer, run_id), received


def input_kept(
    broker: PipelineBroker, entry: Sequence[Leaf], given: StepInput, sealer: Sealer | None, run_id: str
) -> str | None:
    """Arguments as JSON ``[args, kwargs]``, sealed for run ``run_id`` when one of the actors of the
    steps ``entry`` encrypts: what the first steps receive, or the run's input as it was given (then
    ``entry`` is every step a factory's arguments may reach). None for arguments that are not JSON."""
    try:
        text = encode_value([list(given.args), dict(given.kwargs or {})])
    except DefinitionError:
        return None
    return _sealed_json(broker, entry, text, sealer, run_id)


def _sealed_json(broker: PipelineBroker, entry: Sequence[Leaf], text: str, sealer: Sealer | None, run_id: str) -> str:
    if sealer is not None and any(_encrypts(broker, leaf) for leaf in entry):
        return orjson.dumps(sealer.seal(orjson.loads(text), SealedFor(run=run_id))).decode()
    return text


def _encrypts(broker: PipelineBroker, leaf: Leaf) -> bool:
    actor = broker.actors.get(leaf.actor_name)
    return actor is not None and encrypts(actor)


def _sealed(broker: PipelineBroker, leaf: Leaf, sealer: Sealer) -> Leaf:
    """``leaf`` with what its actor marks secret sealed."""
    actor = broker.actors.get(leaf.actor_name)
    if actor is None or not encrypts(actor):
        return leaf
    args, kwargs = sealer.seal_arguments(actor, leaf.args, dict(leaf.kwargs))
    return dataclasses.replace(leaf, args=args, kwargs=kwargs)
