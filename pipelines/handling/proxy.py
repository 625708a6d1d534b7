"""Dramatiq's message proxy, as the framework reads and settles it: in this one module.

Dramatiq's ``MessageProxy`` wraps the message a consumer delivered (``_message``, no public name) and,
after a failure, the exception the actor raised (``_exception``); it settles a delivery by its public
``failed`` flag. Every other module goes through the functions here.

Our brokers' deliveries are :class:`DeliveredMessage` s: the arguments an actor is called with are the
ones ``Payloads`` recorded in the outcome (sealed values opened, a typed payload validated), while the
message itself keeps its wire form for a retry or a dead letter.
"""

from __future__ import annotations

from typing import Any

import dramatiq

from pipelines.handling.outcome import outcome_of


def message_of(proxy: dramatiq.broker.MessageProxy) -> dramatiq.Message[Any]:
    """The message a delivery carries, in its wire form (to enqueue a copy, or dead-letter it)."""
    message: dramatiq.Message[Any] = proxy._message
    return message


def exception_of(proxy: dramatiq.broker.MessageProxy) -> BaseException | None:
    """The exception the actor raised on this delivery, if any."""
    exception: BaseException | None = proxy._exception
    return exception


def let_go(proxy: dramatiq.broker.MessageProxy) -> None:
    """Settle a failed delivery as done: a copy put off carries its failure (Dramatiq acknowledges a
    delivery that is not ``failed`` and rejects one that is)."""
    proxy.failed = False


class DeliveredMessage(dramatiq.broker.MessageProxy):
    """A delivery whose actor gets the arguments recorded in its outcome, when there are some."""

    # Read-only on purpose: what the actor gets is recorded in the outcome, never set on the proxy.
    @property
    def args(self) -> tuple[Any, ...]:  # type: ignore[override]
        opened = outcome_of(self).scratch.arguments
        return opened[0] if opened is not None else tuple(message_of(self).args)

    @property
    def kwargs(self) -> dict[str, Any]:  # type: ignore[override]
        opened = outcome_of(self).scratch.arguments
        return opened[1] if opened is not None else dict(message_of(self).kwargs)
