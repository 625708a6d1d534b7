"""The heartbeat's message counts: every message a worker ran, per actor and minute, in the run store."""

from __future__ import annotations

import time
from collections.abc import Mapping

import dramatiq

from pipelines import step
from pipelines.app import App
from pipelines.errors import StoreUnavailable
from pipelines.middleware import Heartbeat
from pipelines.store.base import WorkerBeat
from pipelines.store.counts import ActorCounts, MinuteCounts, per_actor
from tests.support.fixtures import MakeApp, StartWorker

TIMEOUT_S = 30


def counted(app: App) -> dict[str, ActorCounts]:
    now_ms = int(time.time() * 1000)
    return per_actor(app.store.message_counts(now_ms - 3_600_000, now_ms))


def test_plain_messages_and_pipeline_steps_are_counted_per_actor_with_their_failures_and_dead_letters(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app(worker={"heartbeat_s": 0.1})

    @dramatiq.actor(broker=app.broker)
    def square(x: int) -> int:
        time.sleep(0.05)  # a measured duration
        return x * x

    @dramatiq.actor(broker=app.broker)
    def refuse(x: int) -> None:
        raise ValueError(x)

    @dramatiq.actor(broker=app.broker, profile="fire_and_forget", max_retries=0)
    def ping(x: int) -> None:
        raise ValueError(x)

    start_worker(app)
    square.send(2)
    square.send(3)
    refuse.send(1)
    ping.send(1)
    assert app.start(step(square, 4)).result(timeout_s=TIMEOUT_S) == 16
    deadline = time.monotonic() + TIMEOUT_S
    expected = {"square": 3, "refuse": 1, "ping": 1}
    while {actor: counts.processed for actor, counts in counted(app).items()} != expected:
        assert time.monotonic() < deadline, counted(app)
        time.sleep(0.05)  # the counts arrive with the next heartbeat
    while counted(app)["refuse"].dead_lettered < 1:  # settled after it was counted processed
        assert time.monotonic() < deadline, counted(app)
        time.sleep(0.05)

    counts = counted(app)
    assert (counts["square"].failed, counts["square"].dead_lettered) == (0, 0)
    assert 0.05 <= counts["square"].slowest_ms / 1000 < TIMEOUT_S
    assert 0.05 <= (counts["square"].mean_s or 0) <= counts["square"].slowest_ms / 1000
    assert (counts["refuse"].processed, counts["refuse"].failed, counts["refuse"].dead_lettered) == (1, 1, 1)
    assert (counts["ping"].failed, counts["ping"].dead_lettered) == (1, 0)  # dropped, not dead-lettered


class UnsteadyStore:
    """The two roles a heartbeat writes, kept in memory, with outages to switch on: of the whole store, or
    of its counts alone (a beat recorded, then the store lost)."""

    def __init__(self) -> None:
        self.down = False
        self.counts_down = False
        self.beats: list[WorkerBeat] = []
        self.minutes: dict[int, dict[str, ActorCounts]] = {}

    def _answer(self) -> None:
        if self.down:
            raise StoreUnavailable("Redis at redis://store:6379 does not answer.")

    def beat(self, worker: WorkerBeat, *, keep_ms: int) -> None:
        self._answer()
        self.beats.append(worker)

    def forget_worker(self, worker_id: str) -> None:
        self._answer()

    def worker_beats(self) -> list[WorkerBeat]:
        return self.beats[-1:]

    def add_counts(self, minutes: Mapping[int, Mapping[str, ActorCounts]], *, keep_ms: int) -> None:
        self._answer()
        if self.counts_down:
            raise StoreUnavailable("Redis at redis://store:6379 does not answer.")
        for minute, actors in minutes.items():
            kept = self.minutes.setdefault(minute, {})
            for actor, counts in actors.items():
                kept[actor] = kept.get(actor, ActorCounts()) + counts

    def message_counts(self, from_ms: int, to_ms: int) -> list[MinuteCounts]:
        return [MinuteCounts(minute, actors) for minute, actors in sorted(self.minutes.items())]


def test_counts_a_store_did_not_take_go_with_the_next_beat_and_are_added_once() -> None:
    store = UnsteadyStore()
    heartbeat = Heartbeat(store=store, interval_s=60)
    heartbeat.tally.processed("charge", 0.25, failed=True)
    heartbeat.tally.dead_lettered("charge")

    store.down = True
    heartbeat.beat()
    heartbeat.tally.processed("charge", 0.5, failed=False)
    store.down, store.counts_down = False, True
    heartbeat.beat()
    heartbeat.tally.processed("charge", 0.125, failed=False)
    store.counts_down = False
    heartbeat.beat()
    heartbeat.beat()  # nothing new: nothing added twice

    assert per_actor(store.message_counts(0, 0)) == {"charge": ActorCounts(3, 1, 1, 875, 500)}
    assert len(store.beats) == 3
