"""Why a message was dead-lettered, carried in the dead letter's AMQP headers.

Our consumers dead-letter by publishing the message to the namespace's dead-letter exchange with a
:class:`DeadLetterReason` in its headers (then acknowledging it). Messages RabbitMQ dead-letters by
itself (a quorum queue's delivery limit, after a worker crashed on them repeatedly) carry RabbitMQ's
``x-death`` headers instead; :meth:`DeadLetterReason.from_headers` reads both.

Both brokers implement :class:`DeadLetterAdmin`, what ``pipelines.dead_letters.queues`` needs to list, replay and
purge dead letters; a new broker implements it and passes ``tests/pipelines/broker/test_dead_letter_admin.py``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any, Protocol

import dramatiq

from pipelines import options as opt
from pipelines.errors import error_name
from pipelines.wire import option_values as wire_options
from pipelines.wire.steps import StepAddress

#: Prefix of our headers on a dead letter.
HEADER_PREFIX = "x-pipelines-"
#: Longest traceback excerpt kept with a dead letter, in characters (its end is kept).
MAX_TRACEBACK_CHARS = 2000


@dataclass(frozen=True)
class DeadLetterReason:
    """Why and where a message died."""

    reason: str
    """"retries exhausted", "permanent error", "malformed message", "unknown actor", "delivery limit", ..."""
    error_type: str | None = None
    error: str | None = None
    traceback: str | None = None
    attempts: int | None = None
    actor: str | None = None
    queue: str | None = None
    routing_key: str | None = None
    correlation_id: str | None = None
    run_id: str | None = None
    step: str | None = None
    at: str = ""

    def to_headers(self) -> dict[str, Any]:
        return {f"{HEADER_PREFIX}{name.replace('_', '-')}": value for name, value in asdict(self).items() if value}

    @classmethod
    def from_headers(cls, headers: Mapping[str, Any] | None) -> DeadLetterReason:
        """The reason recorded in a dead letter's headers, ours or RabbitMQ's own ``x-death``."""
        headers = dict(headers or {})
        values: dict[str, Any] = {}
        for field in fields(cls):
            value = headers.get(f"{HEADER_PREFIX}{field.name.replace('_', '-')}")
            if value is not None:
                values[field.name] = value.decode() if isinstance(value, bytes) else value
        if "reason" in values:
            return cls(**values)
        deaths = headers.get("x-death") or [{}]
        death = deaths[0] if isinstance(deaths[0], dict) else {}
        why = headers.get("x-first-death-reason") or death.get("reason") or "rejected"
        why = why.decode() if isinstance(why, bytes) else str(why)
        queue = death.get("queue") or headers.get("x-first-death-queue")
        time = death.get("time")
        return cls(
            reason=why.replace("_", " "),
            queue=queue.decode() if isinstance(queue, bytes) else queue,
            at=time.isoformat() if isinstance(time, datetime) else "",
        )


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def reason_for(
    message: dramatiq.Message[Any] | dramatiq.broker.MessageProxy,
    *,
    reason: str,
    exception: BaseException | None,
    queue: str | None = None,
    routing_key: str | None = None,
) -> DeadLetterReason:
    """The reason to record for ``message``, dead-lettered because of ``exception`` (if any)."""
    step = StepAddress.best_effort(message)
    excerpt = message.options.get(opt.TRACEBACK)
    if exception is not None and excerpt is None:
        excerpt = "".join(traceback.format_exception(exception))
    return DeadLetterReason(
        reason=reason,
        error_type=error_name(exception) if exception is not None else None,
        error=str(exception) if exception is not None else None,
        traceback=excerpt[-MAX_TRACEBACK_CHARS:] if excerpt else None,
        attempts=wire_options.attempt(message.options),
        actor=message.actor_name or None,
        queue=queue,
        routing_key=routing_key,
        correlation_id=message.options.get(opt.CORRELATION),
        run_id=step.run_id if step else None,
        step=step.node if step else None,
        at=now_iso(),
    )


@dataclass(frozen=True)
class RawDeadLetter:
    """A dead letter as its queue holds it."""

    queue: str
    """The dead-letter queue."""
    body: bytes
    headers: Mapping[str, Any]
    message_id: str


class DeadLetterPublisher(Protocol):
    """Dead-lettering a message that is no longer a delivery (a long-running job whose worker died)."""

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Put ``body``, a message of ``queue``'s actor, in that actor queue's dead-letter queue with ``reason``."""
        ...


class DeadLetterAdmin(DeadLetterPublisher, Protocol):
    """The dead-letter queues of a broker's namespace: put, read, take and purge letters.

    ``queue`` in the reading methods is a dead-letter queue (``naming.dead_letter_queue``); one that
    does not exist (yet) holds no letters.
    """

    def peek_dead_letters(self, queue: str, limit: int) -> list[RawDeadLetter]:
        """Up to ``limit`` dead letters of ``queue``, oldest first, left in place: reading a letter never
        counts as a delivery of it (a queue's delivery limit cannot drop it)."""
        ...

    def remove_dead_letters(self, queue: str, remove: Callable[[RawDeadLetter], bool]) -> None:
        """Hand each letter of ``queue`` to ``remove``, oldest first: those it returns True for leave the
        queue (a replay returns True once it is published), the others stay in their order. An error it
        raises keeps that letter and every later one, and is raised to the caller."""
        ...

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every dead letter of ``queue``; returns how many there were."""
        ...
