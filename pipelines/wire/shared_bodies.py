"""Turning what a queue received into the message its actor runs.

A queue belongs to exactly one actor, so a body shared by several queues (a fan-out, an event) is
resolved per queue: the actor is the queue's, the arguments are the branch's own followed by the
shared input. Each copy gets its own deterministic message id, so a redelivery keeps its id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dramatiq

from pipelines import options as opt
from pipelines.wire.option_values import MalformedOption


class UnresolvableMessage(ValueError):
    """A message that does not fit the queue it arrived on; the message says why."""


def _branch(branches: object, actor_name: str) -> Mapping[str, Any] | None:
    """This actor's branch of a fan-out's ``pipeline_branches`` option, checked.

    Raises:
        MalformedOption: The option, or this actor's branch, is not of the fan-out's shape.
    """
    if not isinstance(branches, dict):
        raise MalformedOption(opt.BRANCHES, branches, "an object of actor name to branch")
    branch = branches.get(actor_name)
    if branch is None:
        return None
    expected = "a branch {args: list, kwargs: object, options: object}"
    if not isinstance(branch, dict):
        raise MalformedOption(opt.BRANCHES, branches, expected)
    for name, kind in (("args", list), ("kwargs", dict), ("options", dict)):
        if not isinstance(branch.get(name, kind()), kind):
            raise MalformedOption(opt.BRANCHES, branches, expected)
    return branch


def resolve(message: dramatiq.Message[Any], *, actor_name: str, queue_name: str) -> dramatiq.Message[Any]:
    """The message ``actor_name`` (on Dramatiq queue ``queue_name``) should process.

    Raises:
        UnresolvableMessage: When a fan-out body has no branch for this actor, or a direct message
            names another actor.
        MalformedOption: A fan-out's branches are not of its shape.
    """
    if message.actor_name:
        if message.actor_name != actor_name:
            raise UnresolvableMessage(
                f"message for actor {message.actor_name!r} arrived on the queue of {actor_name!r}"
            )
        if message.queue_name == queue_name:
            return message
        return message.copy(queue_name=queue_name)
    branches = message.options.get(opt.BRANCHES)
    if branches is not None:
        branch = _branch(branches, actor_name)
        if branch is None:
            raise UnresolvableMessage(f"fan-out message has no branch for actor {actor_name!r}")
        options = {key: value for key, value in message.options.items() if key != opt.BRANCHES}
        options.update(branch.get("options", {}))
        # A branch that ignores its input gets only its own arguments, as a direct message would.
        shared_args, shared_kwargs = ((), {}) if options.get(opt.PIPE_IGNORE) else (message.args, message.kwargs)
        return dramatiq.Message(
            queue_name=queue_name,
            actor_name=actor_name,
            args=(*branch.get("args", ()), *shared_args),
            kwargs={**branch.get("kwargs", {}), **shared_kwargs},
            options=options,
            message_id=f"{message.message_id}.{actor_name}",
            message_timestamp=message.message_timestamp,
        )
    if opt.EVENT_TOPIC in message.options:
        return dramatiq.Message(
            queue_name=queue_name,
            actor_name=actor_name,
            args=message.args,
            kwargs=message.kwargs,
            options=dict(message.options),
            message_id=f"{message.message_id}.{actor_name}",
            message_timestamp=message.message_timestamp,
        )
    raise UnresolvableMessage("message names no actor, branches or event topic")
