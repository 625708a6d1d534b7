"""A run's first messages as an outbox entry: what a start in the caller's transaction leaves for a worker's
relay to publish once that transaction commits (the messages, each with its delay, as JSON text), and the
relay's publish of the entries it takes.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import dramatiq
import orjson

from pipelines.broker.common import PipelineBroker

logger = logging.getLogger(__name__)


def outbox_entry(messages: Sequence[tuple[dramatiq.Message[Any], int]]) -> str:
    """The entry of a run's first messages, each with its delay in ms."""
    return orjson.dumps([{"delay_ms": delay, "message": message.asdict()} for message, delay in messages]).decode()


def entry_messages(entry: str) -> list[tuple[dramatiq.Message[Any], int]]:
    """The messages of an outbox entry, each with its delay in ms.

    Raises:
        ValueError: The entry is not one :func:`outbox_entry` wrote.
    """
    try:
        items = orjson.loads(entry)
        return [(dramatiq.Message(**item["message"]), int(item["delay_ms"])) for item in items]
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"not an outbox entry ({e})") from None


def publish_entries(broker: PipelineBroker, entries: Sequence[tuple[str, str]]) -> None:
    """Publish the messages of outbox entries, (run id, entry), with confirms: one publish per delay.

    An entry that cannot be read (written by hand into the table) is logged and left out, not retried.

    Raises:
        PublishError, BrokerUnavailable: Not all were confirmed (the entries stay for the next relay).
    """
    by_delay: dict[int, list[dramatiq.Message[Any]]] = defaultdict(list)
    for run_id, entry in entries:
        try:
            messages = entry_messages(entry)
        except ValueError as e:
            logger.error("The outbox entry of run %s cannot be published: %s. Start the run again.", run_id, e)
            continue
        for message, delay in messages:
            by_delay[delay].append(message)
    for delay, batch in sorted(by_delay.items()):
        broker.enqueue_many(batch, delay=delay or None)
