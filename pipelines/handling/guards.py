"""What happens to a message when a hook that guards a guarantee fails instead of deciding.

Only observability may fail open: a middleware whose class sets ``fails_open = True`` (tracing,
metrics, the correlation id's log context, and a user's own middleware marked with
[`observational`][pipelines.handling.guards.observational]) has its errors logged and counted, and the
message goes on. Any other ``before_process_message`` that raises (a claim, an idempotency key, a
payload check, a lease, a schedule, Dramatiq's own time limit or age limit, a user's middleware) means
the actor does not run: the message is put off when the cause is transient (the run store or the
broker did not answer, or answered an error it gives while loading, failing over or out of memory) and
dead-lettered with the middleware's name and the error otherwise. An ``after_process_message`` that
raises fails a message that had not failed yet, so it is dead-lettered with the reason rather than
acknowledged as if all its bookkeeping had been done.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import dramatiq

from pipelines.errors import ServiceUnavailable
from pipelines.handling.deferral import put_off_while_store_down
from pipelines.handling.outcome import fail_message

logger = logging.getLogger(__name__)

#: Errors that say "not now" rather than "never": the message is put off, not dead-lettered.
TRANSIENT: tuple[type[BaseException], ...] = (ServiceUnavailable, TimeoutError, ConnectionError)


M = TypeVar("M", bound=type[dramatiq.Middleware])


def observational(middleware: M) -> M:
    """Mark a middleware class as observability (logging, error reporting, metrics): when one of its hooks
    raises, the error is logged and counted (``pipelines_middleware_failures_total``) and the message goes
    on. Unmarked, a middleware guards a guarantee: a message whose ``before_process_message`` raises is not
    run but dead-lettered with the error (put off when the cause is transient)."""
    middleware.fails_open = True  # type: ignore[attr-defined]
    return middleware


def observed_failure(hook: Any, signal: str, error: Exception) -> None:
    """Log the failure of an observational middleware's hook; the message goes on."""
    logger.error("%s failed in %s (observational: the message goes on).", middleware_name(hook), signal, exc_info=error)


def guards_silently(middleware: dramatiq.Middleware) -> bool:
    """Whether a user's middleware hooks into message handling without saying whether it guards or observes:
    it then fails closed, which Dramatiq's users do not expect (the broker says so once, when it is added)."""
    own = type(middleware).__module__.split(".")[0] in ("pipelines", "dramatiq", "periodiq")
    hooks = ("before_process_message", "after_process_message", "after_skip_message")
    overrides = any(getattr(type(middleware), h) is not getattr(dramatiq.Middleware, h) for h in hooks)
    return not own and overrides and not getattr(middleware, "fails_open", False)


def fails_open(hook: Any) -> bool:
    """Whether the middleware of a (bound) hook is observability, whose failures must not stop a message."""
    return bool(getattr(getattr(hook, "__self__", None), "fails_open", False))


def middleware_name(hook: Any) -> str:
    """The class name of a (bound) hook's middleware, as dead-letter reasons, logs and metrics give it."""
    return type(getattr(hook, "__self__", hook)).__name__


def before_failed(broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, hook: Any, error: Exception) -> None:
    """A guard's ``before_*`` hook failed: put the message off or fail it (the caller skips it)."""
    if isinstance(error, TRANSIENT):
        logger.warning(
            "%s could not decide about %s (%s); putting it off.", middleware_name(hook), message.message_id, error
        )
        put_off_while_store_down(broker, message, error)
        return
    logger.error("%s failed on %s; dead-lettering it.", middleware_name(hook), message.message_id, exc_info=error)
    fail_message(message, f"{middleware_name(hook)} failed", error)


def after_failed(message: dramatiq.broker.MessageProxy, hook: Any, error: Exception) -> None:
    """A guard's ``after_*`` hook failed: a message that had not failed yet is failed with the reason."""
    logger.error("%s failed after %s ran.", middleware_name(hook), message.message_id, exc_info=error)
    if not message.failed:
        fail_message(message, f"{middleware_name(hook)} failed", error)
