"""Message options as they arrive from the wire: each parsed in one place, typed, with a clear error.

Any producer can publish any JSON, so an option's value is checked where it is read, by the one
function named after it here. The consumer calls :func:`check_options` before a delivery reaches a
worker thread, so a message with a bad value is dead-lettered as ``malformed message`` naming the
option, instead of running without the guard that reads it (a step claim, a retry count, a time limit).
Options nobody here knows are left alone (a user's own middleware may read them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from pipelines import options as opt
from pipelines.errors import CarriedFailure, InvalidActorOption
from pipelines.wire.codec import MalformedMessage, check_fields
from pipelines.wire.rates import Rate, parse_rate
from pipelines.wire.steps import StepAddress

#: Dramatiq's own options this package does not define a constant for, read by Dramatiq's middleware.
MAX_AGE = "max_age"
ON_SUCCESS = "on_success"
ON_FAILURE = "on_failure"
PIPE_TARGET = "pipe_target"
#: Options that hold Python objects (exception classes, functions): actor options only, never on the wire.
ACTOR_ONLY = (opt.THROWS, opt.RETRY_WHEN)
#: Header RabbitMQ's quorum queues count redeliveries in.
DELIVERY_COUNT = "x-delivery-count"


class MalformedOption(MalformedMessage):
    """A message option (or header) whose value is not what its reader takes; ``option`` names it."""

    def __init__(self, option: str, value: object, expected: str) -> None:
        super().__init__(f"option {option!r} is {value!r:.100}, expected {expected}")
        self.option = option


def _whole(options: Mapping[str, Any], name: str, low: int) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    if type(value) is not int or value < low:
        raise MalformedOption(name, value, f"a whole number >= {low}")
    return value


def _number(options: Mapping[str, Any], name: str, *, positive: bool) -> float | None:
    value = options.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or (positive and value <= 0):
        raise MalformedOption(name, value, "a positive number" if positive else "a number")
    return float(value)


def _text(options: Mapping[str, Any], name: str) -> str | None:
    value = options.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedOption(name, value, "a string")
    return value


def retries(options: Mapping[str, Any]) -> int:
    """How many times the message was retried so far (0 for a first attempt)."""
    return _whole(options, opt.RETRIES, 0) or 0


def attempt(options: Mapping[str, Any]) -> int:
    """Which attempt at the message this is (1 for the first)."""
    return retries(options) + 1


def max_retries(options: Mapping[str, Any]) -> int | None:
    return _whole(options, opt.MAX_RETRIES, 0)


def min_backoff_ms(options: Mapping[str, Any]) -> int | None:
    return _whole(options, opt.MIN_BACKOFF, 0)


def max_backoff_ms(options: Mapping[str, Any]) -> int | None:
    return _whole(options, opt.MAX_BACKOFF, 0)


def time_limit_ms(options: Mapping[str, Any]) -> float | None:
    return _number(options, opt.TIME_LIMIT, positive=True)


def max_age_ms(options: Mapping[str, Any]) -> float | None:
    return _number(options, MAX_AGE, positive=True)


def eta_ms(options: Mapping[str, Any]) -> float | None:
    """When (epoch ms) a delayed message is due, or None."""
    return _number(options, opt.ETA, positive=False)


def catch_up_of(options: Mapping[str, Any]) -> int | None:
    """The missed tick (epoch ms) a catch-up run of a schedule stands for, or None."""
    return _whole(options, opt.CATCH_UP_OF, 0)


def partition(options: Mapping[str, Any]) -> int | None:
    """The partition of an ordered actor's queue the message is routed to, or None."""
    return _whole(options, opt.PARTITION, 0)


def pipeline(options: Mapping[str, Any]) -> str | None:
    """The name of the registered pipeline whose run the message belongs to, or None (an ad hoc run)."""
    return _text(options, opt.PIPELINE)


def rate_slot_ms(options: Mapping[str, Any]) -> int | None:
    """The rate-limit slot (epoch ms) reserved for the message, or None."""
    return _whole(options, opt.RATE_SLOT, 0)


def pipeline_rate_limit(options: Mapping[str, Any]) -> Rate | None:
    """The rate limit of the registered pipeline whose run this message starts, or None."""
    text = _text(options, opt.PIPELINE_RATE_LIMIT)
    if text is None:
        return None
    try:
        return parse_rate(text, owner="Message")
    except InvalidActorOption:
        raise MalformedOption(opt.PIPELINE_RATE_LIMIT, text, "a rate such as '20/s', '100/m' or '5/h'") from None


def idempotency_key(options: Mapping[str, Any]) -> str | None:
    """The message's own idempotency key (a string: a number would be a different key once stringified)."""
    key = _text(options, opt.IDEMPOTENCY_KEY)
    if key == "":
        raise MalformedOption(opt.IDEMPOTENCY_KEY, key, "a non-empty string")
    return key


def key_done(options: Mapping[str, Any]) -> str | None:
    """An idempotency key the message's actor ran for, carried because the run store could not record it."""
    key = _text(options, opt.KEY_DONE)
    if key == "":
        raise MalformedOption(opt.KEY_DONE, key, "a non-empty string")
    return key


def schema_version(options: Mapping[str, Any]) -> int | None:
    return _whole(options, opt.SCHEMA_VERSION, 1)


def step_result(options: Mapping[str, Any]) -> str | None:
    """A step's result carried by its message because the run store could not record it (JSON text)."""
    value = _text(options, opt.STEP_RESULT)
    if value is not None:
        try:
            orjson.loads(value)
        except orjson.JSONDecodeError:
            raise MalformedOption(opt.STEP_RESULT, value, "a JSON text") from None
    return value


def step_failure(options: Mapping[str, Any]) -> tuple[str, CarriedFailure] | None:
    """A step's final failure carried by its message because the run store could not record it:
    (the dead-letter reason, the failure)."""
    value = options.get(opt.STEP_FAILURE)
    if value is None:
        return None
    fields = ("reason", "error_type", "error")
    if not isinstance(value, Mapping) or any(not isinstance(value.get(name), str) for name in fields):
        raise MalformedOption(opt.STEP_FAILURE, value, "a mapping of reason, error_type and error (strings)")
    return value["reason"], CarriedFailure(value["error_type"], value["error"])


def scheduled_at(options: Mapping[str, Any]) -> str | None:
    """When the scheduler sent a scheduled message (ISO 8601 text), or None for any other message."""
    value = _text(options, opt.SCHEDULED_AT)
    if value is not None:
        import pendulum  # only scheduled messages carry the option

        try:
            pendulum.parse(value)
        except (ValueError, TypeError):
            raise MalformedOption(opt.SCHEDULED_AT, value, "an ISO 8601 time") from None
    return value


def _callback(options: Mapping[str, Any], name: str, actors: Mapping[str, Any]) -> None:
    value = options.get(name)
    if value is not None and not (isinstance(value, str) and value in actors):
        raise MalformedOption(name, value, "the name of a declared actor")


def _pipe_target(options: Mapping[str, Any]) -> None:
    value = options.get(PIPE_TARGET)
    if value is None:
        return
    try:
        check_fields(value)
    except MalformedMessage as e:
        raise MalformedOption(PIPE_TARGET, value, f"a message ({e})") from None


def _strings(options: Mapping[str, Any], name: str, container: type) -> None:
    value = options.get(name)
    if value is None:
        return
    items = value.values() if isinstance(value, dict) else value
    if not isinstance(value, container) or not all(isinstance(item, str) for item in items):
        raise MalformedOption(name, value, f"a {container.__name__} of strings")


def delivery_count(headers: Mapping[str, Any] | None) -> int:
    """How many times RabbitMQ delivered the message before (its quorum queue's count, 0 when absent)."""
    if not headers or DELIVERY_COUNT not in headers:
        return 0
    value = headers[DELIVERY_COUNT]
    # pika hands AMQP long integers over as its own int subclass.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MalformedOption(DELIVERY_COUNT, value, "a whole number >= 0 (a header RabbitMQ sets)")
    return int(value)


def check_options(options: Mapping[str, Any], *, actors: Mapping[str, Any]) -> None:
    """Check every option this package or Dramatiq reads (raises MalformedOption naming the first bad one)."""
    for name in ACTOR_ONLY:
        if name in options:
            raise MalformedOption(name, options[name], "nothing: it is an actor option, not a message option")
    if opt.STEP in options:
        StepAddress.from_option(options[opt.STEP])
    retries(options)
    max_retries(options)
    min_backoff_ms(options)
    max_backoff_ms(options)
    time_limit_ms(options)
    max_age_ms(options)
    eta_ms(options)
    rate_slot_ms(options)
    pipeline_rate_limit(options)
    idempotency_key(options)
    key_done(options)
    schema_version(options)
    step_result(options)
    step_failure(options)
    catch_up_of(options)
    partition(options)
    scheduled_at(options)
    pipeline(options)
    for name in (opt.CORRELATION, opt.SEALED, opt.REPLAYED_FROM, opt.TRACEBACK, opt.EVENT_TOPIC):
        _text(options, name)
    _strings(options, opt.TRACE, dict)
    _strings(options, opt.TRACE_LINKS, list)
    _callback(options, ON_SUCCESS, actors)
    _callback(options, ON_FAILURE, actors)
    _callback(options, opt.ON_RETRY_EXHAUSTED, actors)
    _pipe_target(options)
    if type(options.get(opt.PIPE_IGNORE, False)) is not bool:
        raise MalformedOption(opt.PIPE_IGNORE, options[opt.PIPE_IGNORE], "true or false")
