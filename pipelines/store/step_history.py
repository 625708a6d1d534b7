"""What the store keeps of a step beside its state: its attempts and replays, and its attempts' log records.

A step's history (``h`` in its record, written by the scripts that claim, complete, fail and reopen it)
lists each attempt (its number, when it started and ended, on which worker, its outcome and error) and
each replay of its dead letter (when, and why), oldest first, the latest :data:`HISTORY_ENTRIES`.

Its log records are kept apart from its record (``<run>:logs``, step id → its attempts' logs), so that
reading a run does not read them: the newest attempts' records, within the store's bounds
(``store.step_log_records`` and ``store.step_log_bytes``), for the run's retention.

A failed attempt whose step another claim holds already still ends its own entry and keeps its records
(before the later attempts'): its retry, scheduled before the failure is recorded, may claim the step
first. Its failure changes nothing else: the step is the later attempt's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

#: How many attempts and replays a step's history keeps (the scripts keep the latest this many).
HISTORY_ENTRIES = 20
#: The longest error an attempt's entry keeps (in characters).
HISTORY_ERROR_CHARS = 500
#: What a step keeps of its attempts' log records unless the store is told otherwise: (records, bytes),
#: ``store.step_log_records`` and ``store.step_log_bytes``'s defaults.
STEP_LOG_BOUNDS = (200, 65_536)

Outcome = Literal["succeeded", "retrying", "failed"]

#: Why a failure's record changed nothing but the attempt's own entry and logs (``ClaimLost``).
FAILURE_OVERTAKEN = (
    "The step was claimed again (by this attempt's retry, or after its lease lapsed): only this attempt's own "
    "history entry and logs record its failure."
)


@dataclass(frozen=True)
class HistoryEntry:
    """An attempt of a step (``attempt``), or a replay of its dead letter (``replay``); times in epoch ms.

    An attempt without an outcome is running, or ended without a record: its worker stopped, or its
    lease lapsed and another attempt took the step over before it succeeded.
    """

    kind: Literal["attempt", "replay"]
    at_ms: int
    """When the attempt started, or when the step was replayed."""
    attempt: int | None = None
    ended_at_ms: int | None = None
    outcome: Outcome | None = None
    error: str | None = None
    """A failed attempt's error, or why the step was replayed (its dead letter and the reason it died)."""
    worker: str | None = None


def history_of(entries: Sequence[dict[str, Any]] | None) -> tuple[HistoryEntry, ...]:
    """A step's history from its record's ``h``."""
    history = []
    for entry in entries or ():
        if "r" in entry:
            history.append(HistoryEntry("replay", int(entry["a"]), error=entry["r"] or None))
        else:
            history.append(
                HistoryEntry(
                    "attempt",
                    int(entry["a"]),
                    attempt=int(entry["n"]),
                    ended_at_ms=int(entry["b"]) if "b" in entry else None,
                    outcome=entry.get("o"),
                    error=entry.get("e") or None,
                    worker=entry.get("w") or None,
                )
            )
    return tuple(history)


@dataclass(frozen=True)
class LogRecord:
    """One log record a step emitted: when (epoch ms), its level and logger, and its text (secrets
    masked, a traceback included)."""

    at_ms: int
    level: str
    logger: str
    text: str

    def size(self) -> int:
        """What it weighs against ``store.step_log_bytes``: its bytes as stored."""
        return len(orjson.dumps([self.at_ms, self.level, self.logger, self.text]))


@dataclass(frozen=True)
class AttemptLog:
    """The log records of one attempt of a step, the newest within the bounds, and how many older ones
    were dropped to stay within them."""

    attempt: int
    records: tuple[LogRecord, ...]
    dropped: int = 0

    def to_json(self) -> str:
        """As the store keeps it (with its record count and bytes, which the store bounds a step by)."""
        return orjson.dumps(
            {
                "n": self.attempt,
                "d": self.dropped,
                "c": len(self.records),
                "s": sum(record.size() for record in self.records),
                "r": [[r.at_ms, r.level, r.logger, r.text] for r in self.records],
            }
        ).decode()


def attempt_logs(raw: bytes | str | None) -> tuple[AttemptLog, ...]:
    """A step's attempts' logs, oldest attempt first, as the store keeps them (none for ``None``)."""
    if raw is None:
        return ()
    return tuple(
        AttemptLog(
            attempt=int(block["n"]),
            records=tuple(LogRecord(int(at), level, logger, text) for at, level, logger, text in block["r"]),
            dropped=int(block.get("d", 0)),
        )
        for block in orjson.loads(raw)
    )
