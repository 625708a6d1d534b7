"""The wire format: a Dramatiq message as strict JSON (never pickle), encoded with orjson.

Our brokers call this codec directly instead of Dramatiq's process-wide encoder, so nothing in a
user's process can switch this wire format to pickle by accident; a worker that boots after
``dramatiq.set_encoder()`` chose another encoder says that it is not used (:func:`warn_custom_encoder`).

JSON means JSON: arguments, options (and step results) are refused unless a JSON round trip gives
them back unchanged, and a message's own fields must be of Dramatiq's types. Two documented
conversions are applied the same way on both sides: a tuple arrives as a list, and a pydantic model (a
typed payload or result) as its JSON (its actor validates it back). A ``str``/``int`` enum arrives as
its value, which compares equal. Anything orjson would quietly turn into something else (a
``datetime`` or ``UUID`` into a string, a dataclass into a dict, NaN into null) is refused at send,
naming where it is.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import dramatiq
import orjson
from pydantic import BaseModel

from pipelines.errors import DefinitionError
from pipelines.options import BRANCHES, EVENT_TOPIC

logger = logging.getLogger(__name__)

_FIELDS = ("queue_name", "actor_name", "args", "kwargs", "options", "message_id", "message_timestamp")
_FIELD_TYPES: dict[str, type] = {
    "queue_name": str,
    "actor_name": str,
    "args": list,
    "kwargs": dict,
    "options": dict,
    "message_id": str,
    "message_timestamp": int,
}


def warn_custom_encoder() -> None:
    """Log a warning when ``dramatiq.set_encoder()`` chose an encoder this wire format does not use."""
    encoder = dramatiq.get_encoder()
    if type(encoder) is not dramatiq.JSONEncoder:
        logger.warning(
            "dramatiq.set_encoder(%s) is not used: messages are always this project's JSON (pipelines.wire.codec). "
            "Pass JSON values, or typed payloads (payload=) for models.",
            type(encoder).__name__,
        )


class MalformedMessage(ValueError):
    """A body that is not a JSON Dramatiq message; the message says what is wrong with it."""


def _jsonable(value: Any) -> Any:
    """What orjson cannot encode by itself: pydantic models (typed payloads and results) as their JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def encode_message(message: dramatiq.Message[Any]) -> bytes:
    """Encode a message as JSON bytes.

    Raises:
        DefinitionError: When an argument is not JSON (see the module docstring), naming the actor and where.
    """
    plain = _plain_json(message.args) and _plain_json(message.kwargs) and _plain_json(message.options)
    problem = None if plain else _not_json(message.args, "args") or _not_json(message.kwargs, "kwargs")
    if problem is not None and "NaN" in problem:
        raise DefinitionError(
            f"A message for {_target(message)} has a NaN or infinite number in its arguments ({problem}). "
            "Send a finite number, or None on purpose."
        )
    if problem is not None:
        raise DefinitionError(
            f"A message for {_target(message)} has arguments that are not JSON: {problem}. Pass ids and plain "
            "values (str, int, float, bool, None, lists, dicts with string keys); convert a datetime with "
            ".isoformat() and a UUID with str() before sending, and back in the actor."
        )
    if not plain:
        _check_options(message)
    _check_fields(message)
    try:
        return orjson.dumps(
            {
                "queue_name": message.queue_name,
                "actor_name": message.actor_name,
                "args": message.args,
                "kwargs": message.kwargs,
                "options": message.options,
                "message_id": message.message_id,
                "message_timestamp": message.message_timestamp,
            },
            default=_jsonable,
        )
    except TypeError as e:
        raise DefinitionError(f"A message for {_target(message)} has a value JSON cannot carry: {e}.") from None


def _check_options(message: dramatiq.Message[Any]) -> None:
    """Refuse options that would not come back from the wire as they were set.

    Raises:
        DefinitionError: Naming the option, and what to send instead.
    """
    problem = _not_json(message.options, "options")
    if problem is not None:
        raise DefinitionError(
            f"A message for {_target(message)} has an option that is not JSON: {problem}. Options travel as JSON "
            "like arguments: set plain values (str, int, float, bool, None, lists, dicts with string keys)."
        )


def _check_fields(message: dramatiq.Message[Any]) -> None:
    """Refuse fields that are not of Dramatiq's types.

    Raises:
        DefinitionError: Naming the field.
    """
    fields = message.asdict()
    for name, kind in _FIELD_TYPES.items():
        value = fields[name]
        if name == "args" and isinstance(value, tuple):
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise DefinitionError(
                f"A message for {_target(message)} has {name}={value!r:.60}, a {type(value).__name__}: "
                f"Dramatiq's {name} is a {kind.__name__}."
            )


def _target(message: dramatiq.Message[Any]) -> str:
    if message.actor_name:
        return f"actor {message.actor_name!r}"
    topic = message.options.get(EVENT_TOPIC)
    return f"event {topic!r}" if topic else f"the fan-out to {', '.join(message.options.get(BRANCHES) or ())}"


#: Types a JSON round trip gives back as they were (bool is an int; their subclasses are enums), and
#: pydantic models, which travel as their JSON and are validated back by their actor.
_PLAIN = (str, int, float, type(None), BaseModel)


def _plain_json(value: Any) -> bool:
    """Whether ``value`` is made of JSON's own types only (exactly: no subclass, model or enum), with
    finite floats and 64-bit integers: what nearly every message holds, checked without building the
    places :func:`_not_json` names. False means only that the full check must look."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-(2**63) <= value < 2**64)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(key) is str for key in value) and all(_plain_json(item) for item in value.values())
    if kind is list or kind is tuple:
        return all(_plain_json(item) for item in value)
    return False


def _not_json(value: Any, where: str) -> str | None:
    """What in ``value`` would not come back from a JSON round trip unchanged, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {value}: JSON has no NaN or infinite numbers (it would arrive as None)"
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return f"{where} is an integer over 64 bits"
    if isinstance(value, _PLAIN):
        return None
    if isinstance(value, list | tuple):
        children = [(f"{where}[{index}]", item) for index, item in enumerate(value)]
    elif isinstance(value, dict):
        odd = [key for key in value if not isinstance(key, str)]
        if odd:
            return f"{where} has the key {odd[0]!r}, which is not a string"
        children = [(f"{where}[{key!r}]", item) for key, item in value.items()]
    else:
        return f"{where} is a {type(value).__name__} ({value!r:.60})"
    return next((found for place, item in children if (found := _not_json(item, place))), None)


def decode_message(body: bytes) -> dramatiq.Message[Any]:
    """Decode JSON bytes into a message.

    Raises:
        MalformedMessage: For anything that is not a JSON object with Dramatiq's fields and types.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise MalformedMessage(f"body is not JSON ({e}); first bytes: {body[:40]!r}") from None
    check_fields(data)
    data["args"] = tuple(data["args"])
    return dramatiq.Message(**{name: data[name] for name in _FIELDS})


def check_fields(data: object) -> None:
    """Check that decoded JSON is an object with Dramatiq's message fields, each of its type.

    Raises:
        MalformedMessage: Naming the first field missing or of the wrong type.
    """
    if not isinstance(data, dict):
        raise MalformedMessage(f"body is JSON {type(data).__name__}, not an object")
    missing = [name for name in _FIELDS if name not in data]
    if missing:
        raise MalformedMessage(f"body lacks the field(s) {', '.join(missing)}")
    for name, kind in _FIELD_TYPES.items():
        # bool is an int to isinstance, not to JSON producers: a `true` timestamp is malformed.
        if not isinstance(data[name], kind) or isinstance(data[name], bool):
            raise MalformedMessage(f"field {name} is {type(data[name]).__name__}, expected {kind.__name__}")


def encode_value(value: Any) -> str:
    """Encode a step result as JSON text.

    Raises:
        DefinitionError: When the result is not JSON-serializable.
    """
    problem = None if _plain_json(value) else _not_json(value, "the result")
    if problem is not None:
        raise DefinitionError(f"A step returned a value that is not JSON ({problem}). Return plain values or ids.")
    return orjson.dumps(value, default=_jsonable).decode()


def decode_value(text: str) -> Any:
    """Decode a step result stored as JSON text."""
    return orjson.loads(text)
