"""The value of the ``rate_limit`` option: ``"20/s"``, ``"100/m"`` or ``"5/h"``, parsed in one place.

Actors declare it, and a paced message carries its slot on the wire; ``pipelines.rate_limits`` holds
the limit with it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from pipelines.errors import InvalidActorOption

_RATE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*")
_PERIOD_S = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
_UNITS = {1: "s", 60: "m", 3600: "h"}


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` messages per ``period_s`` seconds."""

    count: float
    period_s: float

    @property
    def interval_ms(self) -> int:
        """The spacing of two messages, in milliseconds."""
        return max(1, round(self.period_s * 1000 / self.count))

    @property
    def text(self) -> str:
        """The rate as :func:`parse_rate` reads it (``"20/s"``)."""
        return f"{self.count:g}/{_UNITS[int(self.period_s)]}"

    @property
    def window_count(self) -> int:
        """How many messages may run in one :attr:`window_ms` (the whole messages of one period)."""
        return max(1, math.floor(self.count))

    @property
    def window_ms(self) -> int:
        """The window the bound is counted in: one period, or as long as ``window_count`` takes at the rate."""
        return max(1, round(self.window_count * self.period_s * 1000 / self.count))


def parse_rate(text: Any, *, owner: str) -> Rate:
    """A rate written ``"20/s"``, ``"100/m"`` or ``"5/h"``.

    Raises:
        InvalidActorOption: Naming ``owner`` and the expected form.
    """
    match = _RATE_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise InvalidActorOption(f"{owner}: rate_limit={text!r} must look like '20/s', '100/m' or '5/h'.")
    return Rate(float(match.group(1)), _PERIOD_S[match.group(2)])
