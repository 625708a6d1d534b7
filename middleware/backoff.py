"""Retries failed messages after an exponential backoff with full jitter, waiting in RabbitMQ.

The n-th retry waits a uniformly random time between 0 and ``min(max_backoff, min_backoff * 2**n)``
(Dramatiq's ``compute_backoff`` gives the exponential bound), in the broker's delay queues: nothing
waits unacknowledged in a worker. Permanent errors are not retried: the types in
``[retries] permanent_errors`` and an actor's ``throws``, or any error an actor's
``retry_when(retries, exception)`` refuses. Options keep Dramatiq's names and units (``max_retries``,
``min_backoff``/``max_backoff`` in ms, ``throws``, ``retry_when``), so actors written for Dramatiq's
``Retries`` behave the same. This replaces ``Retries``; use one or the other.
"""

from __future__ import annotations

import importlib
import logging
import random
import traceback
from collections.abc import Iterable
from typing import Any

import dramatiq
from dramatiq.common import compute_backoff
from dramatiq.middleware import Middleware

from middleware.metrics import RETRY_ATTRIBUTE
from pipelines import options as opt
from pipelines.dead_letters import MAX_TRACEBACK_CHARS, fail_message
from pipelines.errors import ConfigError, InvalidActorOption, PipelinesError

logger = logging.getLogger(__name__)


def import_exceptions(names: Iterable[str]) -> tuple[type[BaseException], ...]:
    """Exception classes from dotted names.

    Raises:
        ConfigError: A name that does not import to an exception class.
    """
    classes = []
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError):
            raise ConfigError(f"retries.permanent_errors: {name!r} does not import. Use a dotted class name.") from None
        if not (isinstance(found, type) and issubclass(found, BaseException)):
            raise ConfigError(f"retries.permanent_errors: {name!r} is not an exception class.")
        classes.append(found)
    return tuple(classes)


class Backoff(Middleware):
    """Schedules retries of failed messages, or gives up on them (see the module docstring)."""

    def __init__(
        self, *, max_retries: int, min_backoff_ms: int, max_backoff_ms: int, permanent: tuple[type[BaseException], ...]
    ) -> None:
        self.max_retries = max_retries
        self.min_backoff_ms = min_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.permanent = permanent

    @property
    def actor_options(self) -> set[str]:
        return {opt.MAX_RETRIES, opt.MIN_BACKOFF, opt.MAX_BACKOFF, opt.THROWS, opt.RETRY_WHEN}

    def before_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        options = actor.options
        problems = [
            f"{name}={options[name]!r} must be a whole number >= {low}"
            for name, low in ((opt.MAX_RETRIES, 0), (opt.MIN_BACKOFF, 1), (opt.MAX_BACKOFF, 1))
            if name in options and not (type(options[name]) is int and options[name] >= low)
        ]
        throws = options.get(opt.THROWS, ())
        classes = throws if isinstance(throws, tuple) else (throws,)
        if not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
            problems.append(f"throws={throws!r} must be an exception class or a tuple of them")
        if opt.RETRY_WHEN in options and not callable(options[opt.RETRY_WHEN]):
            problems.append("retry_when must be a function (retries, exception) -> bool")
        if problems:
            raise InvalidActorOption(f"Actor {actor.actor_name!r}: {'; '.join(problems)}.")

    def _option(
        self, actor: dramatiq.Actor[Any, Any], message: dramatiq.broker.MessageProxy, name: str, default: Any
    ) -> Any:
        return message.options.get(name, actor.options.get(name, default))

    def delay_ms(self, retries: int, min_backoff_ms: int, max_backoff_ms: int) -> int:
        """Full jitter: uniform between 0 and the exponential bound of the ``retries``-th retry."""
        _, bound = compute_backoff(retries, factor=min_backoff_ms, jitter=False, max_backoff=max_backoff_ms)
        return max(1, round(random.uniform(0, min(bound, max_backoff_ms))))

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        if exception is None:
            return None
        actor = broker.get_actor(message.actor_name)
        retries = int(message.options.get(opt.RETRIES, 0))
        throws = self._option(actor, message, opt.THROWS, ())
        retry_when = self._option(actor, message, opt.RETRY_WHEN, None)
        if isinstance(exception, self.permanent) or (throws and isinstance(exception, throws)):
            return self._give_up(message, "permanent error")
        if retry_when is not None and not retry_when(retries, exception):
            return self._give_up(message, "permanent error")
        if retry_when is None and retries >= self._option(actor, message, opt.MAX_RETRIES, self.max_retries):
            return self._give_up(message, "retries exhausted")

        message.options[opt.RETRIES] = retries + 1
        message.options[opt.TRACEBACK] = "".join(traceback.format_exception(exception))[-MAX_TRACEBACK_CHARS:]
        if isinstance(exception, dramatiq.Retry) and exception.delay is not None:
            delay = int(exception.delay)
        else:
            min_ms = self._option(actor, message, opt.MIN_BACKOFF, self.min_backoff_ms)
            max_ms = self._option(actor, message, opt.MAX_BACKOFF, self.max_backoff_ms)
            delay = self.delay_ms(retries, min_ms, max_ms)
        try:
            broker.enqueue(message._message, delay=delay)
        except PipelinesError:
            # Without the retry enqueued, acknowledging would lose the message: dead-letter it instead.
            logger.exception("Could not schedule retry %d of %s.", retries + 1, message.message_id)
            return self._give_up(message, "retry could not be scheduled")
        setattr(message, RETRY_ATTRIBUTE, True)
        logger.info(
            "Retry %d of %s in %d ms after %s.", retries + 1, message.message_id, delay, type(exception).__name__
        )
        return None

    def _give_up(self, message: dramatiq.broker.MessageProxy, why: str) -> None:
        fail_message(message, why)
