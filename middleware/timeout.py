"""Per-actor timeouts, checked against RabbitMQ's consumer timeout when actors are declared.

An actor's ``timeout_s`` (or Dramatiq's ``time_limit`` in ms; default ``[worker] time_limit_s``)
becomes the time limit of each of its deliveries, which ``ActorTimeLimit`` (Dramatiq's ``TimeLimit``)
enforces by raising ``TimeLimitExceeded`` in the actor; the failure is transient and retried like any
other, and the dead letter of one that ran out of retries names the limit. The limit is kept in the
delivery's outcome, not written into the message: a retry or a replay (after the actor's timeout was
raised, say) runs under the actor's limit of its own time. That exception is asynchronous: it interrupts
Python code between bytecodes, never a call blocked in C (a socket read, a database query, an HTTP
request, ``time.sleep``), which is stopped only when it returns. So the limit bounds an actor only as
well as its blocking calls are bounded by timeouts of their own.

A message is unacknowledged while its actor runs, and RabbitMQ closes the channel of a delivery
unacknowledged for longer than its consumer timeout (then redelivers it, forever), so a longer timeout
is refused, except for ``long_running`` actors, whose messages are acknowledged when they start. The
check trusts the time limit: an actor blocked in C past the consumer timeout still has its channel
closed, hence the advice in the refusal.
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

from pipelines import options as opt
from pipelines.errors import InvalidActorOption
from pipelines.handling.outcome import outcome_of
from pipelines.wire import option_values as wire_options


class TimeoutTooLong(InvalidActorOption):
    """An actor's timeout exceeds the broker's consumer timeout."""


class Timeout(Middleware):
    """Turns ``timeout_s`` into Dramatiq time limits and refuses timeouts RabbitMQ cannot honour."""

    def __init__(self, *, default_s: float, consumer_timeout_s: float) -> None:
        self.default_s = default_s
        self.consumer_timeout_s = consumer_timeout_s

    @property
    def actor_options(self) -> set[str]:
        return {opt.TIMEOUT}

    def timeout_s(self, actor: dramatiq.Actor[Any, Any]) -> float:
        """The actor's timeout in seconds."""
        if opt.TIMEOUT in actor.options:
            return float(actor.options[opt.TIMEOUT])
        if opt.TIME_LIMIT in actor.options:
            return float(actor.options[opt.TIME_LIMIT]) / 1000
        return self.default_s

    def before_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        for name in (opt.TIMEOUT, opt.TIME_LIMIT):
            value = actor.options.get(name)
            if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value <= 0):
                raise InvalidActorOption(f"Actor {actor.actor_name!r}: {name}={value!r} must be a positive number.")
        timeout_s = self.timeout_s(actor)
        # A long-running job is acknowledged when it starts, so the consumer timeout does not apply.
        if timeout_s > self.consumer_timeout_s and actor.options.get(opt.PROFILE) != "long_running":
            raise TimeoutTooLong(
                f"Actor {actor.actor_name!r} may run {timeout_s:g} s, longer than the broker's consumer timeout "
                f"({self.consumer_timeout_s:g} s, broker.consumer_timeout_s): RabbitMQ would close the channel "
                "and redeliver it while it still runs. Split the work into shorter steps, make it "
                "profile='long_running', or raise the server's consumer_timeout and broker.consumer_timeout_s "
                "together. Whatever the timeout, give blocking calls (socket, database, HTTP) timeouts of their "
                "own: the time limit cannot interrupt a call blocked in C."
            )

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        # A time limit sent with the message comes first, as in Dramatiq.
        sent_ms = wire_options.time_limit_ms(message.options)
        outcome_of(message).scratch.time_limit_ms = (
            sent_ms or self.timeout_s(broker.get_actor(message.actor_name)) * 1000
        )
