"""Gives every message a correlation id and makes the message's ids available to code and log lines.

A message enqueued while another is processed inherits that message's correlation id (chain steps,
fan-out branches, chord callbacks, events, retries); one enqueued elsewhere takes the caller's
(``pipelines.correlation(...)``) or a new one. Replays keep the dead letter's. While a message is
processed, ``pipelines.current_correlation_id()`` and every log line carry its ids.
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

from pipelines import options as opt
from pipelines.config.sections import LoggingConfig
from pipelines.context import MessageContext, current_correlation_id, enter_message, leave_message, new_correlation_id
from pipelines.observability import logs


class CorrelationId(Middleware):
    """Stamps correlation ids on enqueue and holds the message context while a message runs."""

    #: Observability: its failures are logged and never stop a message (see ``pipelines.handling.guards``).
    fails_open = True

    def __init__(self, *, logging: LoggingConfig | None = None) -> None:
        self.logging = logging

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        # Worker processes of the `dramatiq` CLI: every log line carries the message's ids.
        if self.logging is not None:
            logs.install(self.logging.format, self.logging.level)

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        if not message.options.get(opt.CORRELATION):
            message.options[opt.CORRELATION] = current_correlation_id() or new_correlation_id()

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        enter_message(MessageContext.of(message))

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        leave_message()

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        leave_message()
