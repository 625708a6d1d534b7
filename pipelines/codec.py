"""The wire format: a Dramatiq message as strict JSON (never pickle), encoded with orjson.

Our brokers call this codec directly instead of Dramatiq's process-wide encoder, so nothing in a
user's process can switch this wire format to pickle by accident.
"""

from __future__ import annotations

import json
from typing import Any

import dramatiq
import orjson
from pydantic import BaseModel

from pipelines.errors import DefinitionError
from pipelines.options import BRANCHES, EVENT_TOPIC

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
        DefinitionError: When an argument or option is not JSON-serializable, naming the actor.
    """
    try:
        body = orjson.dumps(
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
        raise DefinitionError(
            f"A message for {_target(message)} has arguments that are not JSON: {e}. "
            "Pass ids and plain values (str, int, float, bool, None, lists, dicts)."
        ) from None
    # orjson writes NaN and infinities as null: look for them (with the standard library's strict
    # encoder) only when a null is there at all.
    if b"null" in body and not _strict_json((message.args, message.kwargs)):
        raise DefinitionError(
            f"A message for {_target(message)} has a NaN or infinite number in its arguments, which JSON "
            "cannot carry (it would arrive as None). Send a finite number, or None on purpose."
        )
    return body


def _target(message: dramatiq.Message[Any]) -> str:
    if message.actor_name:
        return f"actor {message.actor_name!r}"
    topic = message.options.get(EVENT_TOPIC)
    return f"event {topic!r}" if topic else f"the fan-out to {', '.join(message.options.get(BRANCHES) or ())}"


def _strict_json(value: Any) -> bool:
    """Whether ``value`` encodes as JSON without NaN or infinities."""
    try:
        json.dumps(value, allow_nan=False, default=_jsonable)
    except ValueError:
        return False
    return True


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
    try:
        return orjson.dumps(value, default=_jsonable).decode()
    except TypeError as e:
        raise DefinitionError(f"A step returned a value that is not JSON ({e}). Return plain values or ids.") from None


def decode_value(text: str) -> Any:
    """Decode a step result stored as JSON text."""
    return orjson.loads(text)
