"""Typed payloads: an actor's one argument as a pydantic model, with a schema version that can evolve.

``@dramatiq.actor(payload=Order, schema_version=2, upgrades={1: order_v1_to_v2})`` declares that the
actor takes one ``Order``. A producer's arguments (a model, a dict, or the fields as keywords) are
validated when the message is sent, so the caller gets the error at once, and travel as the model's
JSON with ``schema_version`` in the message options. A worker upgrades an older message step by step
through ``upgrades`` (each a function from one version's dict to the next one's) and validates it
again; a message that does not validate is dead-lettered with pydantic's error, never retried. A
message of a newer version than the worker knows waits for an upgraded worker (it is put off), so
producers and workers can be deployed in either order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import dramatiq
from pydantic import BaseModel, ValidationError

from pipelines import options as opt
from pipelines.errors import DefinitionError, InvalidActorOption


class InvalidPayload(DefinitionError):
    """A message's arguments do not fit its actor's payload model; the message has pydantic's errors."""


class InvalidArguments(DefinitionError):
    """A message's arguments do not fit its actor's signature (too many, too few, an unknown keyword)."""


class NewerPayload(DefinitionError):
    """A message was sent with a newer schema version than this worker's actor knows."""


def payload_model(actor: dramatiq.Actor[Any, Any]) -> type[BaseModel] | None:
    """The actor's payload model, if it declared one."""
    model: type[BaseModel] | None = actor.options.get(opt.PAYLOAD)
    return model


def check_declaration(actor: dramatiq.Actor[Any, Any]) -> None:
    """Refuse a payload declaration that cannot work.

    Raises:
        InvalidActorOption: Naming the actor and the fix.
    """
    options = actor.options
    name = actor.actor_name
    model = options.get(opt.PAYLOAD)
    if model is None:
        stray = [o for o in (opt.SCHEMA_VERSION, opt.UPGRADES) if o in options]
        if stray:
            raise InvalidActorOption(f"Actor {name!r}: {', '.join(stray)} need payload=<a pydantic model>.")
        return
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise InvalidActorOption(f"Actor {name!r}: payload={model!r} must be a pydantic model class.")
    if len(inspect.signature(actor.fn).parameters) != 1:
        raise InvalidActorOption(f"Actor {name!r} has a payload model, so it must take exactly one argument.")
    version = options.setdefault(opt.SCHEMA_VERSION, 1)
    if type(version) is not int or version < 1:
        raise InvalidActorOption(f"Actor {name!r}: schema_version={version!r} must be a whole number >= 1.")
    upgrades: Mapping[Any, Any] = options.get(opt.UPGRADES, {})
    if not isinstance(upgrades, Mapping) or not all(
        type(v) is int and 1 <= v < version and callable(f) for v, f in upgrades.items()
    ):
        raise InvalidActorOption(
            f"Actor {name!r}: upgrades must map older versions (1..{version - 1}) to functions from that "
            "version's dict to the next version's dict."
        )
    oldest = min(upgrades, default=version)
    missing = [v for v in range(oldest, version) if v not in upgrades]
    if missing:
        raise InvalidActorOption(f"Actor {name!r}: upgrades has no function for version(s) {missing}.")


_signatures: dict[Callable[..., Any], inspect.Signature] = {}


def check_arguments(actor: dramatiq.Actor[Any, Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Refuse arguments the actor's function cannot be called with: calling it would only raise
    TypeError, and retrying would raise it again.

    Raises:
        InvalidArguments: With Python's reason.
    """
    signature = _signatures.get(actor.fn)
    if signature is None:
        signature = _signatures[actor.fn] = inspect.signature(actor.fn)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise InvalidArguments(f"Actor {actor.actor_name!r} cannot take these arguments: {e}.") from None


def to_wire(actor: dramatiq.Actor[Any, Any], message: dramatiq.Message[Any]) -> dramatiq.Message[Any]:
    """The message with its arguments validated and replaced by the payload's JSON and version.

    Raises:
        InvalidPayload: With pydantic's errors.
    """
    model = payload_model(actor)
    if model is None:
        return message
    args, kwargs = message.args, message.kwargs
    try:
        if len(args) == 1 and not kwargs:
            payload = args[0] if isinstance(args[0], model) else model.model_validate(args[0])
        elif not args:
            payload = model.model_validate(kwargs)
        else:
            raise InvalidPayload(
                f"Actor {actor.actor_name!r} takes one {model.__name__}: send a {model.__name__}, a dict, or its "
                f"fields as keywords, not {len(args)} positional argument(s)."
            )
    except ValidationError as e:
        raise InvalidPayload(f"Payload of actor {actor.actor_name!r} is invalid: {_errors(e)}") from None
    return message.copy(
        args=(payload.model_dump(mode="json"),),
        kwargs={},
        options={opt.SCHEMA_VERSION: actor.options[opt.SCHEMA_VERSION]},
    )


def from_wire(actor: dramatiq.Actor[Any, Any], args: tuple[Any, ...], version: int | None) -> BaseModel:
    """The payload a worker hands the actor: upgraded from ``version`` (1 if absent) and validated.

    Raises:
        NewerPayload: The message is of a newer version than the actor's.
        InvalidPayload: It does not validate (or an upgrade failed).
    """
    model = payload_model(actor)
    assert model is not None
    current: int = actor.options[opt.SCHEMA_VERSION]
    version = version or 1
    if version > current:
        raise NewerPayload(
            f"Actor {actor.actor_name!r} knows schema version {current}, the message is version {version}: "
            "it waits for an upgraded worker."
        )
    if len(args) != 1:
        raise InvalidPayload(f"Actor {actor.actor_name!r} expects one payload, the message has {len(args)}.")
    data = args[0]
    upgrades: Mapping[int, Callable[[Any], Any]] = actor.options.get(opt.UPGRADES, {})
    for step in range(version, current):
        if step not in upgrades:
            raise InvalidPayload(f"Actor {actor.actor_name!r} has no upgrade from schema version {step}.")
        try:
            data = upgrades[step](data)
        except Exception as e:
            raise InvalidPayload(
                f"Upgrading a version {step} payload of {actor.actor_name!r} failed: {type(e).__name__}: {e}"
            ) from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise InvalidPayload(f"Payload of actor {actor.actor_name!r} is invalid: {_errors(e)}") from None


def _errors(error: ValidationError) -> str:
    """pydantic's errors in one line, without the input values (they may be secret)."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']}" for e in error.errors())
