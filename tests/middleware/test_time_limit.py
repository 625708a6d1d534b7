"""The time limit's deadlines (``pipelines.middleware.time_limit``) when the process stood still: a freeze
moves them on by the time it lasted, a deadline due all the same still fires. Driven with the times given
directly, in a thread of this process that the limit interrupts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from dramatiq.middleware.time_limit import TimeLimitExceeded

from pipelines.middleware.time_limit import FROZEN_AFTER_S, _ActorDeadlines

LIMIT_S = 8.0
LOGGER = logging.getLogger("tests.time_limit")


class Busy(threading.Thread):
    """A worker thread inside its actor until told to stop; says whether a time limit interrupted it."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.started = threading.Event()
        self.interrupted = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        self.started.set()
        try:
            while not self.stop.is_set():
                time.sleep(0.001)
        except TimeLimitExceeded:
            self.interrupted.set()

    @property
    def thread_id(self) -> int:
        assert self.ident is not None
        return self.ident


@pytest.fixture
def busy() -> Iterator[Busy]:
    thread = Busy()
    thread.start()
    thread.started.wait(5)
    yield thread
    thread.stop.set()
    thread.join(5)


def armed(busy: Busy) -> tuple[_ActorDeadlines, float]:
    """Deadlines (their thread not started: the test fires them) with ``busy``'s armed at ``LIMIT_S``, and
    the time it was armed, at most that."""
    deadlines = _ActorDeadlines(0.01, LOGGER)
    armed_at = time.monotonic()
    deadlines.arm(busy.thread_id, LIMIT_S)
    return deadlines, armed_at


def interrupted(busy: Busy) -> bool:
    return busy.interrupted.wait(2)


def test_a_freeze_moves_armed_deadlines_on_by_the_time_it_lasted(busy: Busy, caplog: pytest.LogCaptureFixture) -> None:
    deadlines, at = armed(busy)
    frozen_s = 20.0  # stopped 2 s into the actor, woken 20 s later: 22 s on the clock, 2 s of work

    with caplog.at_level(logging.WARNING, LOGGER.name):
        deadlines.fire(at + 2 + frozen_s, frozen_s=frozen_s)
        deadlines.fire(at + LIMIT_S + frozen_s - 0.5, frozen_s=0.0)  # 7.5 s of work: not yet

    assert not interrupted(busy)
    assert "This process stood still for 20.0 s: the time limits of its 1 running actors move on as much." in (
        caplog.messages
    )
    deadlines.fire(at + LIMIT_S + frozen_s + 0.5, frozen_s=0.0)  # 8.5 s of work: past its limit
    assert interrupted(busy)


def test_a_deadline_due_even_after_the_freeze_is_forgiven_still_fires(busy: Busy) -> None:
    deadlines, at = armed(busy)
    frozen_s = 20.0  # stopped 10 s into the actor: past its 8 s before the freeze

    deadlines.fire(at + 10 + frozen_s, frozen_s=frozen_s)

    assert interrupted(busy)


def test_a_tick_late_by_less_than_a_freeze_is_not_forgiven(busy: Busy) -> None:
    deadlines, at = armed(busy)
    late_s = FROZEN_AFTER_S * 0.9  # a busy process, not a frozen one

    deadlines.fire(at + LIMIT_S + late_s, frozen_s=late_s)

    assert interrupted(busy)
