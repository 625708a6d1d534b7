"""Producer-side rate limits: at most N messages per second, minute or hour reach an actor (or start a
pipeline), evenly spaced, whoever publishes them.

Every publish to a rate-limited actor reserves the next free slot in the run store (one atomic script
for a whole batch: the generic cell rate algorithm, a token bucket of one) and is published delayed
until its slot, through RabbitMQ's delay queues. Nothing blocks and nothing is dropped: a burst is
spread out, so the downstream service behind the actor sees at most the rate (late by at most the
shortest delay tier, never early).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pipelines.errors import InvalidActorOption
from pipelines.store.roles import RateSlots

_RATE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*")
_PERIOD_S = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` messages per ``period_s`` seconds."""

    count: float
    period_s: float

    @property
    def interval_ms(self) -> int:
        """The spacing of two messages, in milliseconds."""
        return max(1, round(self.period_s * 1000 / self.count))


def parse_rate(text: Any, *, owner: str) -> Rate:
    """A rate written ``"20/s"``, ``"100/m"`` or ``"5/h"``.

    Raises:
        InvalidActorOption: Naming ``owner`` and the expected form.
    """
    match = _RATE_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise InvalidActorOption(f"{owner}: rate_limit={text!r} must look like '20/s', '100/m' or '5/h'.")
    return Rate(float(match.group(1)), _PERIOD_S[match.group(2)])


class RateLimiter:
    """Reserves publish slots in the run store."""

    def __init__(self, store: RateSlots) -> None:
        self.store = store

    def delays_ms(self, key: str, rate: Rate, count: int) -> list[int]:
        """Milliseconds each of ``count`` messages must wait for its slot, in order."""
        return self.store.reserve_slots(f"rate:{key}", count=count, interval_ms=rate.interval_ms)
