"""How a message finds its queues: AMQP topic matching and the routing of our three message shapes.

A message is *direct* (one actor: routing key = the actor's name, followed by ``~<partition>`` for an
ordered actor), *fan-out* (several actors share
one body: routing key = their names joined by dots, the branch data in ``options[BRANCHES]``), or an
*event* (routing key = the topic, on the events exchange). The RabbitMQ broker lets the exchanges do
the matching; the memory broker uses :func:`topic_matches` on the same bindings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import dramatiq

from pipelines import options as opt
from pipelines.wire import option_values as wire_options
from pipelines.wire.naming import partition_routing_key, routing_key_for


@dataclass(frozen=True, slots=True)
class Route:
    """Which exchange (by role) and routing key a message is published with."""

    exchange: Literal["work", "events"]
    routing_key: str


def route_of(message: dramatiq.Message[Any]) -> Route:
    """The route of a message, from its shape."""
    if message.actor_name:
        partition = wire_options.partition(message.options)
        if partition is not None:
            return Route("work", partition_routing_key(message.actor_name, partition))
        return Route("work", message.actor_name)
    branches = message.options.get(opt.BRANCHES)
    if branches:
        return Route("work", routing_key_for(list(branches)))
    topic = message.options.get(opt.EVENT_TOPIC)
    if topic:
        return Route("events", str(topic))
    raise ValueError(f"message {message.message_id} names no actor, branches or event topic")


@lru_cache(maxsize=4096)
def topic_matches(pattern: str, routing_key: str) -> bool:
    """AMQP topic matching: ``*`` is exactly one word, ``#`` is zero or more words."""
    return _match(tuple(pattern.split(".")), tuple(routing_key.split(".")))


def _match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head in ("*", words[0])) and _match(rest, words[1:])
