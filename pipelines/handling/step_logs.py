"""Capturing the log records a step emits while it runs, bounded and masked, to keep them with the step.

One :class:`StepLogCapture` handler sits on the root logger of a worker process. It is inert until a
step starts: :func:`start` puts an :class:`AttemptLogBuffer` in a context variable of the step's own
thread, and the handler adds to it the records that reach the root logger from that context only. A
thread the step starts has a context of its own, so what other threads log never lands in the step;
:func:`stop` takes the buffer back when the attempt ends.

The buffer keeps the newest records, ``store.step_log_records`` and ``store.step_log_bytes`` at most,
each record's text (its message, and its traceback) cut at :data:`RECORD_CHARS` characters and its
secrets masked (:func:`~pipelines.config.masking.mask_text`) as in every log line.
"""

from __future__ import annotations

import contextvars
import logging
import traceback
from collections import deque

from pipelines.config.masking import mask_text
from pipelines.store.step_history import AttemptLog, LogRecord

#: The most characters of one record's text kept (its start and its end, when longer).
RECORD_CHARS = 2000

_buffer: contextvars.ContextVar[AttemptLogBuffer | None] = contextvars.ContextVar("step_log_buffer", default=None)


class AttemptLogBuffer:
    """The newest records of one attempt, within ``max_records`` and ``max_bytes`` (the newest record is
    always kept: one record's text is cut at :data:`RECORD_CHARS`)."""

    def __init__(self, *, attempt: int, max_records: int, max_bytes: int) -> None:
        self.attempt = attempt
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._records: deque[tuple[LogRecord, int]] = deque()
        self._bytes = 0
        self.dropped = 0

    def add(self, record: LogRecord) -> None:
        size = record.size()
        self._records.append((record, size))
        self._bytes += size
        while len(self._records) > 1 and (len(self._records) > self.max_records or self._bytes > self.max_bytes):
            _, dropped_size = self._records.popleft()
            self._bytes -= dropped_size
            self.dropped += 1

    def log(self) -> AttemptLog:
        return AttemptLog(self.attempt, tuple(record for record, _ in self._records), self.dropped)


def start(*, attempt: int, max_records: int, max_bytes: int) -> None:
    """Capture what this thread's context logs from now on, as ``attempt`` of a step."""
    _buffer.set(AttemptLogBuffer(attempt=attempt, max_records=max_records, max_bytes=max_bytes))


def stop() -> AttemptLog | None:
    """Stop capturing; what was captured (None when nothing was being captured)."""
    buffer = _buffer.get()
    _buffer.set(None)
    return buffer.log() if buffer is not None else None


def record_text(record: logging.LogRecord) -> str:
    """A record's message and traceback, masked, cut at :data:`RECORD_CHARS` (keeping its start and end)."""
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        text += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
    if record.stack_info:
        text += "\n" + record.stack_info
    text = mask_text(text)
    if len(text) > RECORD_CHARS:
        half = RECORD_CHARS // 2
        text = f"{text[:half]} … {text[-half:]}"
    return text


class StepLogCapture(logging.Handler):
    """Adds each record that reaches the root logger to the buffer of the step that runs in its context."""

    def handle(self, record: logging.LogRecord) -> bool:  # no lock: each buffer belongs to one thread
        buffer = _buffer.get()
        if buffer is None or not self.filter(record):
            return False
        try:
            buffer.add(LogRecord(int(record.created * 1000), record.levelname, record.name, record_text(record)))
        except Exception:  # observability: a record that cannot be kept is reported, never raised
            self.handleError(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)


def install() -> None:
    """Put one :class:`StepLogCapture` on the root logger (once a process). A root logger without a
    handler gets Python's basic one first: with only this one, what Python prints when nothing is
    configured (``logging.lastResort``: warnings and errors) would be lost."""
    root = logging.getLogger()
    if not any(isinstance(handler, StepLogCapture) for handler in root.handlers):
        if not root.handlers:
            logging.basicConfig()
        root.addHandler(StepLogCapture())
