"""Rate limits: at most N messages per second, minute or hour reach an actor (or start a pipeline).

The worker holds the limit: before a rate-limited actor runs, its message takes a slot in the run
store (one atomic script, :meth:`~pipelines.store.roles.RateSlots.take_slot`), or is put off through
the delay queues until the slot the script reserved for it. So the limit holds however and whenever
messages reach the queue: a backlog, a restart, a replay, several producers. Two rules meet there:

- **the bound**: at most ``count`` runs in any window of one period and :data:`WINDOW_MARGIN_MS` (a
  list of the latest run times), so any window of one period of actor starts sees at most the rate
  while the time from taking a slot to the actor starting varies by less than the margin (one more
  when a thread is held up longer between the two);
- **the spacing**: slots ``interval_ms`` apart, the generic cell rate algorithm with a burst of one,
  so a backlog is spread out instead of running ``count`` at once at the start of each period.

Producers pace too, as an optimisation: each publish reserves the next slot on the same timeline (one
script for a whole batch), is delayed until it, and carries it, so a paced message arrives when its
slot is due and runs without being put off.
"""

from __future__ import annotations

from typing import Any

from dramatiq.common import current_millis

from pipelines import options as opt
from pipelines.store.base import SlotTake
from pipelines.store.roles import RateSlots
from pipelines.wire.rates import Rate

#: Added to the window the bound is counted in, in ms: a worker thread starts the actor a few ms after
#: its message took the slot (more on a busy machine), so a window counted where actors start would
#: otherwise see one or two more than the rate. It costs a twentieth of the rate at 20/s.
WINDOW_MARGIN_MS = 50


def slot_grace_ms(shortest_tier_s: float) -> int:
    """How far from its time a held slot is honoured: two of the shortest delay tier, since a message
    comes back from the delay queues up to one shortest tier late (and may hop twice near its slot)."""
    return 2 * round(shortest_tier_s * 1000)


def actor_key(actor_name: str) -> str:
    """The key of an actor's rate limit (producers and workers share it)."""
    return f"actor:{actor_name}"


def pipeline_key(name: str) -> str:
    """The key of a registered pipeline's rate limit on the starts of its runs."""
    return f"pipeline:{name}"


class RateLimiter:
    """Reserves slots for publishes and takes them for runs, in the run store."""

    def __init__(self, store: RateSlots) -> None:
        self.store = store

    def delays_ms(self, key: str, rate: Rate, count: int) -> list[int]:
        """Milliseconds each of ``count`` messages must wait for its slot, in order."""
        return self.store.reserve_slots(f"rate:{key}", count=count, interval_ms=rate.interval_ms)

    def run_pacing(self, pipeline: str, rate: Rate) -> tuple[int | None, dict[str, Any]]:
        """When a run of ``pipeline``, limited to ``rate``, starts (ms from now, None for at once), and
        the options its first steps carry: the limit and their slot, which the worker holds too."""
        delay_ms = self.delays_ms(pipeline_key(pipeline), rate, 1)[0] or None
        return delay_ms, {opt.PIPELINE_RATE_LIMIT: rate.text, opt.RATE_SLOT: current_millis() + (delay_ms or 0)}

    def take(self, key: str, rate: Rate, *, held_ms: int | None, grace_ms: int) -> SlotTake:
        """A slot for a message about to run, or how long it must wait (see the module docstring).

        ``held_ms`` is the slot the message holds (reserved by its producer or when it was put off); it
        is honoured within ``grace_ms`` of its time, since a delay queue returns a message late.
        """
        return self.store.take_slot(
            f"rate:{key}",
            interval_ms=rate.interval_ms,
            window_count=rate.window_count,
            window_ms=rate.window_ms + WINDOW_MARGIN_MS,
            held_ms=held_ms or 0,
            grace_ms=grace_ms,
        )
