"""Screening a delivery before any worker thread sees it: one rule for both brokers.

Any producer can publish anything to an actor's queue (and anything can be put in a memory queue).
:func:`screen` turns a body and its headers into the message the queue's actor runs, or raises what
makes it a dead letter: over the size limit, not a JSON Dramatiq message, not for this queue, a fan-out
of the wrong shape, a header or an option of the wrong type (``pipelines.wire.option_values``). Each broker's
consumer catches *everything* it raises and dead-letters the delivery with :func:`screened_out_reason` as its
reason, so no delivery can escape to Dramatiq's consumer loop, which would restart the consumer (on
RabbitMQ closing the channel of every queue in the group and sending their prefetched messages back
with their delivery counts raised).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import dramatiq
import orjson
from dramatiq.common import q_name

from pipelines.dead_letters.reasons import DeadLetterReason, now_iso
from pipelines.errors import MessageTooLarge
from pipelines.wire.codec import decode_message
from pipelines.wire.option_values import check_options, delivery_count
from pipelines.wire.shared_bodies import UnresolvableMessage, resolve

#: Longest message id taken from a body for a dead letter that came without one.
MAX_LETTER_ID_CHARS = 200


def screen(
    body: bytes,
    headers: Mapping[str, Any] | None,
    *,
    actor: str | None,
    queue_name: str,
    max_bytes: int,
    actors: Mapping[str, dramatiq.Actor[Any, Any]],
) -> tuple[dramatiq.Message[Any], int]:
    """The message to run for this delivery, and how many times the broker delivered it before.

    Args:
        actor: The queue's actor (a RabbitMQ queue has one); None for a queue that every actor of
            Dramatiq queue ``queue_name`` shares (the memory broker's), where the body must name one.

    Raises:
        MessageTooLarge: The body is over ``max_bytes``.
        MalformedMessage: What makes it malformed, naming the field, option or header.
        UnresolvableMessage: It is not for this queue's actor.
    """
    if len(body) > max_bytes:
        raise MessageTooLarge(f"body is {len(body)} bytes, over broker.max_message_bytes")
    count = delivery_count(headers)
    decoded = decode_message(body)
    if actor is None:
        actor = shared_queue_actor(decoded.actor_name, queue_name, actors)
    message = resolve(decoded, actor_name=actor, queue_name=queue_name)
    check_options(message.options, actors=actors)
    return message, count


def shared_queue_actor(named: str | None, queue_name: str, actors: Mapping[str, dramatiq.Actor[Any, Any]]) -> str:
    """The actor of Dramatiq queue ``queue_name`` (shared by its actors) that a body naming ``named`` is for.

    A body that names no actor (a fan-out or an event: the memory broker resolves those per actor when
    they are published) is taken for the queue's first actor, whose resolving then says what is wrong.

    Raises:
        UnresolvableMessage: It names an actor that is not on this queue (or the queue has none).
    """
    group = sorted(name for name, found in actors.items() if found.queue_name == q_name(queue_name))
    if named and named in group:
        return named
    if named or not group:
        raise UnresolvableMessage(f"message for actor {named!r} arrived on queue {queue_name!r}, not one of its")
    return group[0]


def screened_out_reason(
    error: BaseException, *, actor: str, queue: str, routing_key: str | None = None
) -> DeadLetterReason:
    """The dead-letter reason of a delivery screened out on ``actor``'s ``queue``: :func:`screen` raised
    ``error`` (or taking the delivery failed with it)."""
    return DeadLetterReason(
        reason="message too large" if isinstance(error, MessageTooLarge) else "malformed message",
        error_type=type(error).__name__,
        error=str(error),
        actor=actor,
        queue=queue,
        routing_key=routing_key,
        at=now_iso(),
    )


def named_actor(body: bytes) -> str | None:
    """The actor a body names, if it is a JSON object with a string ``actor_name`` (before any checks)."""
    found = _peek(body).get("actor_name")
    return found if isinstance(found, str) else None


def letter_id(body: bytes) -> str:
    """An id for a dead letter published without one: the body's ``message_id`` if it has a usable
    one, else a new one (so that ``dlq show``/``replay``/``purge`` can name every letter)."""
    found = _peek(body).get("message_id")
    if isinstance(found, str) and 0 < len(found) <= MAX_LETTER_ID_CHARS and found.isprintable():
        return found
    return f"unnamed-{uuid.uuid4().hex}"


def _peek(body: bytes) -> dict[str, Any]:
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}
