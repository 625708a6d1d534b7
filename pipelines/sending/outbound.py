"""What happens to a message between ``send()`` and the wire, the same in both brokers.

In order, for each message to an actor:

1. a fan-out branch whose actor treats its messages specially (ordered, typed, encrypting or
   rate-limited) leaves the shared body as a message of its own;
2. a typed payload is validated and becomes the model's JSON with its schema version
   (``pipelines.payloads``), other arguments are bound to the actor's signature; an event is validated
   against every typed subscriber known here;
3. an ordered actor's message gets the partition of its key (``pipelines.profiles``);
4. what the actor marks secret is sealed (``pipelines.payloads.sealing``);
5. a rate-limited actor's message gets the delay of its reserved slot, and the slot itself, which the
   worker honours (``pipelines.rate_limits``).

Then the broker encodes it, and :meth:`Outbound.check_body` applies the size policy.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import dramatiq
from dramatiq.common import current_millis

from pipelines import options as opt
from pipelines.errors import MessageTooLarge
from pipelines.payloads.sealing import Sealer, encrypts, has_sealed
from pipelines.payloads.typed import check_arguments, payload_model, to_wire
from pipelines.profiles.kinds import ordering_key, partition_for
from pipelines.rate_limits.limiter import RateLimiter, actor_key
from pipelines.sending.unsupported_options import refuse_unsupported_options
from pipelines.wire.rates import parse_rate
from pipelines.wire.routing import route_of, topic_matches
from pipelines.wire.shared_bodies import resolve

logger = logging.getLogger(__name__)

Actors = Mapping[str, dramatiq.Actor[Any, Any]]


class Outbound:
    """Prepares messages for publishing (see the module docstring)."""

    def __init__(
        self,
        *,
        sealer: Sealer | None = None,
        limiter: RateLimiter | None = None,
        warn_bytes: int | None = None,
        large_policy: Literal["warn", "error"] = "warn",
        consumer_timeout_s: float = float("inf"),
    ) -> None:
        self.sealer = sealer
        self.consumer_timeout_s = consumer_timeout_s
        """RabbitMQ's consumer timeout: no message's time limit may exceed it (``unsupported_options``)."""
        self.limiter = limiter
        self.warn_bytes = warn_bytes
        self.large_policy = large_policy
        self._warned: set[str] = set()

    def prepare(
        self,
        actors: Actors,
        messages: Sequence[dramatiq.Message[Any]],
        delay: int | None = None,
        *,
        accepted: Collection[str] = (),
    ) -> list[tuple[dramatiq.Message[Any], int | None]]:
        """Each message to publish with its delay in ms (see the module docstring); ``accepted`` are the
        options the broker's middleware read.

        Raises:
            InvalidPayload: A typed actor's arguments do not validate.
            DefinitionError: An ordering key cannot be taken from the arguments, or an option could not
                work here (``pipelines.sending.unsupported_options``).
        """
        prepared = [self._prepare_one(actors, m, accepted) for original in messages for m in _split(actors, original)]
        delays = self._delays(actors, prepared, delay)  # stamps each paced message with its slot
        return list(zip(prepared, delays, strict=True))

    def _prepare_one(
        self, actors: Actors, message: dramatiq.Message[Any], accepted: Collection[str]
    ) -> dramatiq.Message[Any]:
        actor = actors.get(message.actor_name) if message.actor_name else None
        refuse_unsupported_options(message, actor, accepted=accepted, consumer_timeout_s=self.consumer_timeout_s)
        if actor is None:
            topic = message.options.get(opt.EVENT_TOPIC)
            if topic is not None:
                _check_event(actors, topic, message)
            return message
        # A retry or a replay is on the wire already (versioned, partitioned, sealed): leave it be. Sealed
        # input (an encrypting step's result) cannot be read here: the worker validates it.
        typed = payload_model(actor) is not None and opt.SCHEMA_VERSION not in message.options
        if typed and not has_sealed([message.args, message.kwargs]):
            message = to_wire(actor, message)
        elif _first_send(message) and payload_model(actor) is None:
            check_arguments(actor, message.args, message.kwargs)
        if actor.options.get(opt.PROFILE) == "ordered" and opt.PARTITION not in message.options:
            partition = partition_for(ordering_key(actor, message), int(actor.options[opt.PARTITIONS]))
            message = message.copy(options={opt.PARTITION: partition})
        if self.sealer is not None and encrypts(actor) and opt.SEALED not in message.options:
            message = self.sealer.seal_message(actor, message)
        return message

    def _delays(self, actors: Actors, messages: list[dramatiq.Message[Any]], delay: int | None) -> list[int | None]:
        delays: list[int | None] = [delay] * len(messages)
        if self.limiter is None:
            return delays
        by_actor: dict[str, list[int]] = {}
        for index, message in enumerate(messages):
            actor = actors.get(message.actor_name) if message.actor_name else None
            # A message put off by a worker holds its slot already, and so may a retry (stale then: the
            # worker takes it a new one).
            if actor is not None and actor.options.get(opt.RATE_LIMIT) and opt.RATE_SLOT not in message.options:
                by_actor.setdefault(actor.actor_name, []).append(index)
        for actor_name, indexes in by_actor.items():
            rate = parse_rate(actors[actor_name].options[opt.RATE_LIMIT], owner=f"Actor {actor_name!r}")
            slots = self.limiter.delays_ms(actor_key(actor_name), rate, len(indexes))
            now = current_millis()
            for index, slot in zip(indexes, slots, strict=True):
                delays[index] = max(delay or 0, slot) or None
                # The worker runs a message that holds a due slot without taking another one.
                messages[index] = messages[index].copy(options={opt.RATE_SLOT: now + slot})
        return delays

    def check_body(self, message: dramatiq.Message[Any], body: bytes) -> None:
        """Warn about (or refuse, by ``[broker] large_message_policy``) a message over the warning size.

        Raises:
            MessageTooLarge: With the "error" policy.
        """
        if self.warn_bytes is None or len(body) <= self.warn_bytes:
            return
        target = message.actor_name or route_of(message).routing_key
        advice = (
            f"A message for {target!r} is {len(body)} bytes, over broker.warn_message_bytes = {self.warn_bytes}: "
            "pass ids, not objects, and keep large data in a database or object store."
        )
        if self.large_policy == "error":
            raise MessageTooLarge(advice)
        if target not in self._warned:  # once per target and process: a warning, not a flood
            self._warned.add(target)
            logger.warning("%s", advice)


def _first_send(message: dramatiq.Message[Any]) -> bool:
    """Neither a pipeline step (its run checked every step's arguments when it started), nor a retry or
    a replay, nor sealed (its arguments travel in the seal)."""
    options = message.options
    return opt.STEP not in options and not options.get(opt.RETRIES) and opt.SEALED not in options


def _check_event(actors: Actors, topic: str, message: dramatiq.Message[Any]) -> None:
    """An event's payload validated against every typed subscriber this process knows (raises InvalidPayload)."""
    for actor in actors.values():
        if payload_model(actor) is not None and any(
            topic_matches(pattern, topic) for pattern in actor.options.get(opt.SUBSCRIBE, ())
        ):
            to_wire(actor, message)


def _needs_own_message(actor: dramatiq.Actor[Any, Any] | None) -> bool:
    if actor is None:
        return False
    options = actor.options
    return (
        options.get(opt.PROFILE) == "ordered"
        or payload_model(actor) is not None
        or encrypts(actor)
        or bool(options.get(opt.RATE_LIMIT))
    )


def _split(actors: Actors, message: dramatiq.Message[Any]) -> list[dramatiq.Message[Any]]:
    """A fan-out body without the branches that need a message of their own, and those messages."""
    branches: dict[str, Any] | None = message.options.get(opt.BRANCHES)
    if message.actor_name or not branches or not any(_needs_own_message(actors.get(n)) for n in branches):
        return [message]
    own = [
        resolve(message, actor_name=name, queue_name=actors[name].queue_name)
        for name in branches
        if _needs_own_message(actors.get(name))
    ]
    rest = {name: branch for name, branch in branches.items() if not _needs_own_message(actors.get(name))}
    return [message.copy(options={opt.BRANCHES: rest}), *own] if rest else own
