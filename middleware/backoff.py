"""Retries failed messages after an exponential backoff with full jitter, waiting in RabbitMQ.

The n-th retry waits a uniformly random time between 0 and ``min(max_backoff, min_backoff * 2**n)``
(Dramatiq's ``compute_backoff`` gives the exponential bound), in the broker's delay queues: nothing
waits unacknowledged in a worker. Permanent errors are not retried: the types in
``[retries] permanent_errors`` and an actor's ``throws``, or any error an actor's
``retry_when(retries, exception)`` refuses. An ordered actor (see ``pipelines.profiles``) retries in
place instead: the worker waits out the backoff and returns the message to the head of its partition,
so the messages behind it keep their order; a fire-and-forget actor's message is dropped (acknowledged
and counted) once its retries are spent, instead of being dead-lettered. A job that raised
``Cancelled`` (its run was cancelled) just ends. Options keep Dramatiq's names, units and counts
(``max_retries``, ``min_backoff``/``max_backoff`` in ms, 0 meaning the shortest delay tier, ``throws``,
``retry_when``, ``on_retry_exhausted``), so actors written for Dramatiq's ``Retries`` behave the same:
every failure but a ``throws`` one adds one to the message's ``retries`` and stamps its
``requeue_timestamp`` (a final failure's callbacks see ``retries == max_retries + 1``), and a message
whose retries are exhausted is sent to the ``on_retry_exhausted`` actor as ``(message, {"retries",
"max_retries"})``. This replaces ``Retries``; use one or the other.
"""

from __future__ import annotations

import importlib
import logging
import random
import threading
import traceback
from collections.abc import Iterable
from typing import Any

import dramatiq
from dramatiq.common import compute_backoff, current_millis
from dramatiq.errors import ActorNotFound
from dramatiq.middleware import Middleware, TimeLimitExceeded

from pipelines import options as opt
from pipelines.dead_letters.reasons import MAX_TRACEBACK_CHARS
from pipelines.errors import Cancelled, ConfigError, InvalidActorOption, PipelinesError
from pipelines.handling.outcome import fail_message, outcome_of
from pipelines.handling.proxy import message_of
from pipelines.wire import option_values as wire_options

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
        self._stopping = threading.Event()

    @property
    def actor_options(self) -> set[str]:
        return {opt.MAX_RETRIES, opt.MIN_BACKOFF, opt.MAX_BACKOFF, opt.THROWS, opt.RETRY_WHEN, opt.ON_RETRY_EXHAUSTED}

    def before_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        options = actor.options
        problems = [
            f"{name}={options[name]!r} must be a whole number >= {low}"
            for name, low in ((opt.MAX_RETRIES, 0), (opt.MIN_BACKOFF, 0), (opt.MAX_BACKOFF, 0))
            if name in options and not (type(options[name]) is int and options[name] >= low)
        ]
        throws = options.get(opt.THROWS, ())
        classes = throws if isinstance(throws, tuple) else (throws,)
        if not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
            problems.append(f"throws={throws!r} must be an exception class or a tuple of them")
        if opt.RETRY_WHEN in options and not callable(options[opt.RETRY_WHEN]):
            problems.append("retry_when must be a function (retries, exception) -> bool")
        exhausted = options.get(opt.ON_RETRY_EXHAUSTED)
        if exhausted is not None and not (isinstance(exhausted, str) and exhausted):
            problems.append(f"on_retry_exhausted={exhausted!r} must be the name of an actor")
        if problems:
            raise InvalidActorOption(f"Actor {actor.actor_name!r}: {'; '.join(problems)}.")

    def _option(
        self, actor: dramatiq.Actor[Any, Any], message: dramatiq.broker.MessageProxy, name: str, default: Any
    ) -> Any:
        return message.options.get(name, actor.options.get(name, default))

    def delay_ms(self, retries: int, min_backoff_ms: int, max_backoff_ms: int) -> int:
        """Full jitter: uniform between 0 and the exponential bound of the ``retries``-th retry (at least
        1 ms: a zero backoff waits in the shortest delay tier)."""
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
        if exception is None or isinstance(exception, Cancelled):
            return None
        actor = broker.get_actor(message.actor_name)
        profile = actor.options.get(opt.PROFILE)
        outcome = outcome_of(message)
        retries = max(wire_options.retries(message.options), outcome.delivery_count)
        if profile == "fire_and_forget":
            outcome.settlement.drop = True
        why, counted = self._verdict(actor, message, retries, exception)
        if counted:
            message.options[opt.RETRIES] = retries + 1
            message.options[opt.REQUEUE_TIMESTAMP] = current_millis()
            message.options[opt.TRACEBACK] = "".join(traceback.format_exception(exception))[-MAX_TRACEBACK_CHARS:]
        if why is not None:
            if counted:
                outcome.settlement.attempts = retries + 1
                self._send_exhausted(broker, actor, message, retries)
            return self._give_up(message, why, exception)
        if isinstance(exception, dramatiq.Retry) and exception.delay is not None:
            delay = int(exception.delay)
        else:
            min_ms = self._option(actor, message, opt.MIN_BACKOFF, self.min_backoff_ms)
            max_ms = self._option(actor, message, opt.MAX_BACKOFF, self.max_backoff_ms)
            delay = self.delay_ms(retries, min_ms, max_ms)
        if profile == "ordered":
            return self._retry_in_place(message, retries, delay, exception)
        try:
            broker.enqueue(message_of(message), delay=delay)
        except PipelinesError:
            # Without the retry enqueued, acknowledging would lose the message: dead-letter it instead.
            logger.exception("Could not schedule retry %d of %s.", retries + 1, message.message_id)
            return self._give_up(message, "retry could not be scheduled")
        outcome.retry_scheduled = True
        logger.info(
            "Retry %d of %s in %d ms after %s.", retries + 1, message.message_id, delay, type(exception).__name__
        )
        return None

    def _verdict(
        self,
        actor: dramatiq.Actor[Any, Any],
        message: dramatiq.broker.MessageProxy,
        retries: int,
        exception: BaseException,
    ) -> tuple[str | None, bool]:
        """Why the message is not retried (None when it is), and whether the failure counts as Dramatiq
        counts it (all but a permanent or ``throws`` error), which also sends it to ``on_retry_exhausted``
        when it is not retried."""
        throws = self._option(actor, message, opt.THROWS, ())
        retry_when = self._option(actor, message, opt.RETRY_WHEN, None)
        if isinstance(exception, self.permanent) or (throws and isinstance(exception, throws)):
            return "permanent error", False
        if retry_when is not None:
            return (None if retry_when(retries, exception) else "permanent error"), True
        if retries >= self._option(actor, message, opt.MAX_RETRIES, self.max_retries):
            return "retries exhausted", True
        return None, True

    def _send_exhausted(
        self,
        broker: dramatiq.Broker,
        actor: dramatiq.Actor[Any, Any],
        message: dramatiq.broker.MessageProxy,
        retries: int,
    ) -> None:
        """Send the message to its ``on_retry_exhausted`` actor, as Dramatiq's ``Retries`` does; it is
        dead-lettered either way, so a send that fails is logged and the letter can be replayed."""
        target = self._option(actor, message, opt.ON_RETRY_EXHAUSTED, None)
        if target is None:
            return
        max_retries = self._option(actor, message, opt.MAX_RETRIES, self.max_retries)
        try:
            broker.get_actor(target).send(message.asdict(), {"retries": retries, "max_retries": max_retries})
        except (ActorNotFound, PipelinesError) as e:
            logger.error(
                "Could not send %s to its on_retry_exhausted actor %r (%s); it is dead-lettered all the same.",
                message.message_id,
                target,
                e,
            )

    def _retry_in_place(
        self, message: dramatiq.broker.MessageProxy, retries: int, delay_ms: int, exception: BaseException
    ) -> None:
        """Hold the partition for the backoff, then return the message to its head (nothing overtakes it).

        The wait ends early when the worker shuts down; the message is returned either way.
        """
        logger.info(
            "Retry %d of %s in place in %d ms after %s.",
            retries + 1,
            message.message_id,
            delay_ms,
            type(exception).__name__,
        )
        self._stopping.wait(delay_ms / 1000)
        outcome = outcome_of(message)
        outcome.settlement.requeue_in_place = True
        outcome.retry_scheduled = True

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stopping.set()

    def _give_up(self, message: dramatiq.broker.MessageProxy, why: str, exception: BaseException | None = None) -> None:
        if isinstance(exception, TimeLimitExceeded) and not str(exception):
            # Dramatiq's error says nothing: the dead letter names the limit that fired.
            limit_s = (
                outcome_of(message).scratch.time_limit_ms or wire_options.time_limit_ms(message.options) or 0
            ) / 1000
            named = TimeLimitExceeded(
                f"The actor ran past its time limit of {limit_s:g} s (timeout_s, or [worker] time_limit_s). "
                "The limit interrupts Python code only: a call blocked in C (a socket, database or HTTP call) "
                "is stopped when it returns, so give such calls timeouts of their own."
            )
            named.__traceback__ = exception.__traceback__
            fail_message(message, why, named)
            return
        fail_message(message, why)
