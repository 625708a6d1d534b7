"""Log lines that say which message they are about: correlation id, run id, message id, actor, attempt.

:class:`MessageContextFilter` adds those fields to every record from the message context;
:class:`JsonFormatter` writes one JSON object per line, :class:`TextFormatter` one line of text per
record (a traceback indented under it). ``install`` puts them on the root logger's handlers, which is
what worker processes do when they boot.

Both formats mask secrets (:func:`~pipelines.config.masking.mask_text`) in the message and the traceback
alike. A log line must also say only what happened: a message or an id that holds a line break
(an exception's text, a producer's correlation id) is written with ``\n`` escaped, and every line of
a traceback is indented, so nothing a message carries can start a line that reads as another record.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from pipelines.config.masking import mask_text
from pipelines.context import current_correlation_id, current_message

#: Record attributes added by MessageContextFilter, in the order JSON lines show them.
CONTEXT_FIELDS = ("correlation_id", "run_id", "message_id", "actor", "attempt")


class MessageContextFilter(logging.Filter):
    """Adds the current message's ids to every record (None outside a message)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = current_message()
        record.correlation_id = current_correlation_id()
        record.run_id = message.run_id if message else None
        record.message_id = message.message_id if message else None
        record.actor = message.actor if message else None
        record.attempt = message.attempt if message else None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the message context, the exception."""

    def format(self, record: logging.LogRecord) -> str:
        # Left on the record, as logging.Formatter does: code that reads records after they were
        # handled (pytest's caplog.records[...].message) finds the line's message there.
        record.message = mask_text(record.getMessage())
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.message,
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        details = _details(self, record)
        if details:
            entry["exception"] = details
        return orjson.dumps(entry, default=str).decode()


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(correlation_id)s %(run_id)s %(message_id)s] %(message)s"
#: What starts every line of a traceback in a text log (no line of it reads as a record).
TRACEBACK_INDENT = "    "


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT`: one line per record, secrets masked, its traceback indented under it."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        record.message = mask_text(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        line = one_line(self.formatMessage(record))
        details = _details(self, record)
        if details:
            line += "".join(f"\n{TRACEBACK_INDENT}{row}" for row in details.splitlines())
        return line


def one_line(text: str) -> str:
    """``text`` with its line breaks escaped (``\\n``, ``\\r``)."""
    return text.replace("\r", "\\r").replace("\n", "\\n") if "\n" in text or "\r" in text else text


def _details(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """A record's traceback and stack, masked ("" for none)."""
    parts = []
    if record.exc_info:
        parts.append(formatter.formatException(record.exc_info))
    if record.stack_info:
        parts.append(formatter.formatStack(record.stack_info))
    return mask_text("\n".join(parts)) if parts else ""


def install(format: Literal["json", "text"], level: str) -> None:
    """Make every handler of the root logger add the message context (and write JSON if asked)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig()
    root.setLevel(level)
    # pika logs every connection and channel open and close at INFO: keep it at WARNING at least (the
    # `dramatiq` CLI already sets CRITICAL in its workers, where our own errors say what went wrong).
    pika_logger = logging.getLogger("pika")
    pika_logger.setLevel(max(logging.WARNING, logging.getLevelName(level), pika_logger.level))
    formatter = JsonFormatter() if format == "json" else TextFormatter()
    for handler in root.handlers:
        if not any(isinstance(f, MessageContextFilter) for f in handler.filters):
            handler.addFilter(MessageContextFilter())
        handler.setFormatter(formatter)
