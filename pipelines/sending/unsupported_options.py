"""Dramatiq message options that could not do here what they do in Dramatiq, refused when the message is sent.

Dramatiq carries whatever options a message is sent with, and a middleware in the worker reads them
(or, when no middleware reads one, it is silently ignored). Rather than ignore one or let it defeat a
guard, a send is refused with a sentence saying what to use instead when its options have:

- ``broker_priority``: quorum queues keep no per-message priority (``pipelines.priority``);
- ``throws`` or ``retry_when``: Python objects (exception classes, functions), which the JSON wire
  format cannot carry, so Dramatiq reads them on the actor only here;
- an option of a Dramatiq middleware this broker does not have (``store_results`` and ``result_ttl``
  need ``dramatiq.results.Results``), which nothing would read;
- a ``time_limit`` longer than RabbitMQ's consumer timeout, to an actor that is not long-running:
  the check made when the actor is declared, for the message (a retry keeps the limit it ran with).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import dramatiq

from pipelines import options as opt
from pipelines.errors import DefinitionError
from pipelines.priority import refuse_broker_priority
from pipelines.wire import option_values as wire_options

#: Options of Dramatiq middleware that are not in its default set, by the middleware that reads them.
OPTIONAL_MIDDLEWARE_OPTIONS = {"store_results": "dramatiq.results.Results", "result_ttl": "dramatiq.results.Results"}


def refuse_unsupported_options(
    message: dramatiq.Message[Any],
    actor: dramatiq.Actor[Any, Any] | None,
    *,
    accepted: Collection[str],
    consumer_timeout_s: float,
) -> None:
    """Refuse ``message`` (to ``actor``, None for an event) if an option of it could not work here.

    ``accepted`` are the options the broker's middleware read (``Broker.actor_options``).

    Raises:
        DefinitionError: Naming the option and what to use instead.
        MalformedOption: ``time_limit`` or ``retries`` is not a number (``pipelines.wire.option_values``).
    """
    owner = f"Message to {message.actor_name or message.options.get(opt.EVENT_TOPIC)!r}"
    options: Mapping[str, Any] = message.options
    refuse_broker_priority(options, owner)
    for name in (opt.THROWS, opt.RETRY_WHEN):
        if name in options:
            raise DefinitionError(
                f"{owner}: {name} cannot be given with a message: it holds Python objects, which JSON (the wire "
                f"format) cannot carry. Declare it on the actor, @dramatiq.actor({name}=...)."
            )
    for name, middleware in OPTIONAL_MIDDLEWARE_OPTIONS.items():
        if name in options and name not in accepted:
            raise DefinitionError(
                f"{owner}: {name} is read by {middleware}, which this broker does not have, so it would be "
                f"ignored. Add it (app.broker.add_middleware({middleware.rsplit('.', 1)[1]}(backend=...))), or "
                "start the actor as a run and read its result: app.start(step(actor, ...)).result()."
            )
    limit_ms = wire_options.time_limit_ms(options)
    long_running = actor is not None and actor.options.get(opt.PROFILE) == "long_running"
    retry = wire_options.retries(options) > 0  # carries the limit its worker ran it with: not for here to refuse
    if limit_ms is not None and limit_ms / 1000 > consumer_timeout_s and not (long_running or retry):
        raise DefinitionError(
            f"{owner}: time_limit={options[opt.TIME_LIMIT]!r} ms is longer than the broker's consumer timeout "
            f"({consumer_timeout_s:g} s, broker.consumer_timeout_s): RabbitMQ would close the channel and "
            "redeliver the message while it still runs. Keep it shorter, or send it to a profile='long_running' "
            "actor."
        )
