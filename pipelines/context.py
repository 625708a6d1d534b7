"""What the code running now is doing: the correlation id and the message being processed.

Kept in ``contextvars`` so that each worker thread (and each asyncio task) sees its own. The
``CorrelationId`` middleware sets the message context around every message; producers set a
correlation id of their own with [`correlation`][pipelines.context.correlation] (a web request's id,
say), and every message they enqueue carries it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipelines import options as opt
from pipelines.wire import option_values as wire_options
from pipelines.wire.naming import new_id
from pipelines.wire.steps import StepAddress

if TYPE_CHECKING:
    import dramatiq


@dataclass(frozen=True, slots=True)
class MessageContext:
    """The message a worker thread is processing."""

    correlation_id: str
    message_id: str
    actor: str
    attempt: int
    run_id: str | None = None
    step: str | None = None

    @classmethod
    def of(cls, message: dramatiq.Message[Any] | dramatiq.broker.MessageProxy) -> MessageContext:
        """The ids of ``message`` that log lines about it carry."""
        step = StepAddress.best_effort(message)
        return cls(
            correlation_id=message.options.get(opt.CORRELATION) or message.message_id,
            message_id=message.message_id,
            actor=message.actor_name,
            attempt=wire_options.attempt(message.options),
            run_id=step.run_id if step else None,
            step=step.node if step else None,
        )


_message: ContextVar[MessageContext | None] = ContextVar("pipelines_message", default=None)
_correlation: ContextVar[str | None] = ContextVar("pipelines_correlation", default=None)


_process_ids: dict[int, str] = {}
"""``host:pid`` by pid: worked out once per process (a step's claim and completion each name it)."""


def process_id() -> str:
    """This process as a worker's heartbeat names it: ``host:pid`` (its pid read at each call: a forked
    worker process has a pid of its own)."""
    pid = os.getpid()
    name = _process_ids.get(pid)
    if name is None:
        name = _process_ids[pid] = f"{socket.gethostname()}:{pid}"
    return name


def worker_id() -> str:
    """Who runs the code now, as a step's record names it: ``host:pid/thread`` (the thread's name)."""
    return f"{process_id()}/{threading.current_thread().name}"


def new_correlation_id() -> str:
    return new_id()


def current_correlation_id() -> str | None:
    """The correlation id of the message being processed, else the one set by
    [`correlation`][pipelines.context.correlation]."""
    message = _message.get()
    return message.correlation_id if message is not None else _correlation.get()


def current_message() -> MessageContext | None:
    """The message this thread is processing, if any."""
    return _message.get()


@contextmanager
def correlation(correlation_id: str | None = None) -> Iterator[str]:
    """Give everything enqueued inside the block this correlation id (a new one if None)."""
    token = _correlation.set(correlation_id or new_correlation_id())
    try:
        yield _correlation.get() or ""
    finally:
        _correlation.reset(token)


def enter_message(context: MessageContext) -> None:
    """Called by middleware before a message is processed."""
    _message.set(context)


def leave_message() -> None:
    """Called by middleware after a message was processed or skipped."""
    _message.set(None)


@contextmanager
def about_message(context: MessageContext) -> Iterator[None]:
    """Log lines written inside the block carry ``context``'s ids, then the previous context is back.

    For code that handles a message outside its processing, such as a rejection on Dramatiq's
    consumer thread.
    """
    token = _message.set(context)
    try:
        yield
    finally:
        _message.reset(token)
