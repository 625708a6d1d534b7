"""A search for runs as callers write it (``app.runs``, ``pipelines runs``), checked into a store query.

Times are taken as people write them: ``15m``/``2h``/``7d`` ago, an ISO 8601 date, epoch milliseconds
or a ``datetime``; a state must be one a run can be in. Bad input is an :class:`InvalidQuery` that
names the forms accepted, never a query that silently finds nothing.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import cast, get_args

from pipelines.errors import InvalidQuery
from pipelines.store.base import RunQuery, RunState

_DURATION = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,6})?)\s*(s|m|h|d)")
#: Epoch milliseconds (ASCII digits only: ``str.isdigit`` takes ``²``, which ``int`` does not).
_EPOCH_MS = re.compile(r"[0-9]{1,15}")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: The most runs one page holds.
MAX_PAGE = 1000
RUN_STATES: tuple[str, ...] = get_args(RunState)
#: A time as callers write it (see :func:`parse_time_ms`).
Time = str | int | float | datetime


def parse_time_ms(value: Time, *, now_s: float | None = None) -> int:
    """A point in time (epoch ms) from ``15m``/``2h``/``7d`` (that long ago), an ISO 8601 date, epoch ms
    or a ``datetime`` (a naive one is local time).

    Raises:
        InvalidQuery: None of those, with the forms it accepts.
    """
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, int | float):
        return int(value)
    text = value.strip()
    now = time.time() if now_s is None else now_s
    if match := _DURATION.fullmatch(text):
        return int((now - float(match.group(1)) * _UNIT_S[match.group(2)]) * 1000)
    if _EPOCH_MS.fullmatch(text):
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except (ValueError, OverflowError):
        raise InvalidQuery(f"{value!r} is not a time: use 15m, 2h, 7d, an ISO 8601 date or epoch ms.") from None


def run_query(
    *, state: str | None, pipeline: str | None, since: Time | None, key: str | None, until: Time | None = None
) -> RunQuery:
    """The store query for these filters (None: any).

    Raises:
        InvalidQuery: An unknown state or a value of ``since`` that is not a time.
    """
    if state is not None and state not in RUN_STATES:
        raise InvalidQuery(f"{state!r} is not a run state: use one of {', '.join(RUN_STATES)}.")
    return RunQuery(
        state=cast(RunState | None, state),
        pipeline=pipeline or None,
        since_ms=parse_time_ms(since) if since is not None else None,
        until_ms=parse_time_ms(until) if until is not None else None,
        key=key or None,
    )


def check_limit(limit: int) -> int:
    """``limit`` if a page may hold that many runs.

    Raises:
        InvalidQuery: Below 1 or above :data:`MAX_PAGE`.
    """
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidQuery(f"limit={limit} is out of range: a page holds 1 to {MAX_PAGE} runs.")
    return limit
