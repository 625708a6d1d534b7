"""Message counts per actor and minute: what every worker process processed, failed and dead-lettered.

Each worker process adds its counts of a minute to the minute's record in the run store (one hash per
minute, a field per actor and measure), a few seconds after the fact, with its heartbeat. Until then a
:class:`Tally` holds them in memory: counting costs a dictionary update under a lock, never a store
call, and what a store that did not answer could not take goes with the next beat. Whatever
sent the message (a pipeline run or a plain ``actor.send()``), it is counted. A record is kept an hour
after its minute, so the store holds about 62 records per namespace, each with five fields an
actor. The console's queues page and ``pipelines queues`` read the last hour from them, without
``[metrics]``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Milliseconds in a minute: a record's span.
MINUTE_MS = 60_000
#: How long a minute's record is kept after the minute, in ms (the console shows the last hour).
KEPT_AFTER_MINUTE_MS = 3_600_000
#: The span the console and ``pipelines queues`` show, in ms: the last hour, what the store keeps.
LAST_HOUR_MS = KEPT_AFTER_MINUTE_MS
#: Most minutes one read of message counts spans (a day).
MAX_COUNTED_MINUTES = 1440
#: The measures of an actor in a minute's record, by field prefix; ``slowest`` keeps the largest value,
#: the others add up.
MEASURES = ("processed", "failed", "dead", "ms", "slowest")


def minute_of(epoch_ms: int) -> int:
    """The start of the minute ``epoch_ms`` falls in (epoch ms)."""
    return epoch_ms - epoch_ms % MINUTE_MS


def minutes_between(from_ms: int, to_ms: int) -> list[int]:
    """The starts of the minutes from the one ``from_ms`` falls in to the one ``to_ms`` falls in, oldest
    first: the last :data:`MAX_COUNTED_MINUTES` of them (at least the first minute)."""
    first = minute_of(from_ms)
    return list(range(first, max(first, minute_of(to_ms)) + 1, MINUTE_MS))[-MAX_COUNTED_MINUTES:]


@dataclass(frozen=True)
class ActorCounts:
    """One actor's messages over a span (a minute, or several added up)."""

    processed: int = 0
    """Messages its actor ran to the end, whether they succeeded or raised."""
    failed: int = 0
    """Of those, how many raised (each attempt of a retried message counts)."""
    dead_lettered: int = 0
    """Messages given up and dead-lettered (a pipeline step's or a plain message's alike)."""
    total_ms: int = 0
    """Time the processed ones took to run, added up, in ms."""
    slowest_ms: int = 0
    """The longest any of them took, in ms."""

    def __add__(self, other: ActorCounts) -> ActorCounts:
        return ActorCounts(
            self.processed + other.processed,
            self.failed + other.failed,
            self.dead_lettered + other.dead_lettered,
            self.total_ms + other.total_ms,
            max(self.slowest_ms, other.slowest_ms),
        )

    @property
    def mean_s(self) -> float | None:
        """The mean time one took to run, in seconds (None when none was processed)."""
        return self.total_ms / self.processed / 1000 if self.processed else None

    def fields(self, actor: str) -> dict[str, int]:
        """Its fields in a minute's record (the measures that are not zero)."""
        values = (self.processed, self.failed, self.dead_lettered, self.total_ms, self.slowest_ms)
        return {f"{measure}|{actor}": value for measure, value in zip(MEASURES, values, strict=True) if value}


@dataclass(frozen=True)
class MinuteCounts:
    """Every actor's counts in one minute (those that did nothing are left out)."""

    minute_ms: int
    """When the minute starts (epoch ms)."""
    actors: Mapping[str, ActorCounts]

    @classmethod
    def from_fields(cls, minute_ms: int, fields: Mapping[bytes | str, bytes | str | int]) -> MinuteCounts:
        """The minute from its record's fields (``<measure>|<actor>`` → count); unknown measures are left out."""
        found: dict[str, dict[str, int]] = {}
        for raw_field, raw_value in fields.items():
            name = raw_field.decode() if isinstance(raw_field, bytes) else raw_field
            measure, _, actor = name.partition("|")
            if measure in MEASURES and actor:
                found.setdefault(actor, {})[measure] = int(raw_value)
        actors = {
            actor: ActorCounts(*(values.get(measure, 0) for measure in MEASURES))
            for actor, values in sorted(found.items())
        }
        return cls(minute_ms, actors)

    def total(self) -> ActorCounts:
        """Every actor's counts added up."""
        return added(self.actors.values())


def added(counts: Iterable[ActorCounts]) -> ActorCounts:
    """``counts`` added up (the slowest of all is the slowest)."""
    total = ActorCounts()
    for one in counts:
        total = total + one
    return total


def per_actor(minutes: Iterable[MinuteCounts]) -> dict[str, ActorCounts]:
    """Each actor's counts over ``minutes`` added up."""
    found: dict[str, ActorCounts] = {}
    for minute in minutes:
        for actor, counts in minute.actors.items():
            found[actor] = found.get(actor, ActorCounts()) + counts
    return found


Minutes = dict[int, dict[str, ActorCounts]]
"""Counts by minute (epoch ms of its start) and actor."""


class Tally:
    """This process's message counts not stored yet (see the module docstring)."""

    def __init__(self) -> None:
        self._minutes: Minutes = {}
        self._lock = threading.Lock()

    def _add(self, actor: str, counts: ActorCounts, at_ms: int | None = None) -> None:
        minute = minute_of(int(time.time() * 1000) if at_ms is None else at_ms)
        with self._lock:
            actors = self._minutes.setdefault(minute, {})
            counted = actors.get(actor)
            actors[actor] = counts if counted is None else counted + counts

    def processed(self, actor: str, took_s: float, *, failed: bool) -> None:
        """One message of ``actor`` ran ``took_s`` seconds and raised or not."""
        took_ms = round(took_s * 1000)
        self._add(actor, ActorCounts(processed=1, failed=int(failed), total_ms=took_ms, slowest_ms=took_ms))

    def dead_lettered(self, actor: str) -> None:
        """One message of ``actor`` was given up and dead-lettered."""
        self._add(actor, ActorCounts(dead_lettered=1))

    def take(self) -> Minutes:
        """Everything counted since the last take, which this forgets."""
        with self._lock:
            taken, self._minutes = self._minutes, {}
        return taken

    def put_back(self, minutes: Mapping[int, Mapping[str, ActorCounts]]) -> None:
        """What a take could not store, counted again for the next, but for the minutes past keeping."""
        oldest = minute_of(int(time.time() * 1000)) - KEPT_AFTER_MINUTE_MS + MINUTE_MS
        for minute, actors in minutes.items():
            if minute >= oldest:
                for actor, counts in actors.items():
                    self._add(actor, counts, minute)
