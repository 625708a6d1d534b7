"""Holds rate limits where messages are consumed (see ``pipelines.rate_limits``).

Before a rate-limited actor runs, and before the first step of a run of a rate-limited registered
pipeline (its message carries the pipeline's limit), the message takes a slot in the run store. When
none is free, the message is put off through the delay queues until the slot the store reserved for
it, and carries that slot, so it runs when it comes back instead of queueing again. It comes before
the middleware that claim a step or a key: a message put off here has claimed nothing.
"""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from pipelines import options as opt
from pipelines.errors import ServiceUnavailable
from pipelines.handling.deferral import put_off, put_off_while_store_down
from pipelines.rate_limits.limiter import RateLimiter, actor_key, pipeline_key
from pipelines.wire import option_values as wire_options
from pipelines.wire.rates import Rate, parse_rate

logger = logging.getLogger(__name__)


class RateLimits(Middleware):
    """Takes a rate-limit slot before the actor runs, or puts the message off until one is free."""

    def __init__(self, *, limiter: RateLimiter, grace_ms: int) -> None:
        self.limiter = limiter
        self.grace_ms = grace_ms
        self._rates: dict[str, Rate] = {}

    def after_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        text = actor.options.get(opt.RATE_LIMIT)
        if text:
            self._rates[actor.actor_name] = parse_rate(text, owner=f"Actor {actor.actor_name!r}")

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        limits: list[tuple[str, str, Rate]] = []
        if message.actor_name in self._rates:
            limits.append((actor_key(message.actor_name), message.actor_name, self._rates[message.actor_name]))
        pipeline_rate = wire_options.pipeline_rate_limit(message.options)
        if pipeline_rate is not None:
            name = wire_options.pipeline(message.options) or ""
            limits.append((pipeline_key(name), f"pipeline {name}", pipeline_rate))
        for key, owner, rate in limits:
            self._take(broker, message, key, owner, rate)

    def _take(
        self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, key: str, owner: str, rate: Rate
    ) -> None:
        held = wire_options.rate_slot_ms(message.options)
        try:
            take = self.limiter.take(key, rate, held_ms=held, grace_ms=self.grace_ms)
        except ServiceUnavailable as e:
            put_off_while_store_down(broker, message, e)
            raise SkipMessage from None
        if take.wait_ms <= 0:
            return
        message.options[opt.RATE_SLOT] = take.slot_ms
        put_off(broker, message, take.wait_ms, f"{owner} is at its rate limit of {rate.text}")
        raise SkipMessage
