"""WorkerBeats, on every backend: each worker process's latest heartbeat, kept for a while, forgotten on stop."""

from __future__ import annotations

import time
from dataclasses import replace

from pipelines.store import RunStore
from pipelines.store.base import WorkerBeat


def beat_of(pid: int, *, at_ms: int, processed: int = 0) -> WorkerBeat:
    return WorkerBeat(
        worker_id=f"host-a:{pid}",
        host="host-a",
        pid=pid,
        parent_pid=1,
        threads=8,
        queues=("default", "pipelines"),
        processed=processed,
        failed=0,
        running=("charge 0123/0.1",),
        started_at_ms=at_ms,
        beat_at_ms=at_ms,
    )


def test_the_latest_beat_of_each_worker_is_read_back_newest_first_and_a_stopped_one_is_forgotten(
    store: RunStore,
) -> None:
    now = int(time.time() * 1000)
    store.beat(beat_of(10, at_ms=now - 2_000), keep_ms=60_000)
    store.beat(beat_of(11, at_ms=now - 1_000), keep_ms=60_000)
    later = replace(beat_of(10, at_ms=now - 2_000, processed=5), beat_at_ms=now)
    store.beat(later, keep_ms=60_000)

    assert store.worker_beats() == [later, beat_of(11, at_ms=now - 1_000)]

    store.forget_worker("host-a:10")
    assert store.worker_beats() == [beat_of(11, at_ms=now - 1_000)]


def test_a_beat_past_its_keeping_is_dropped(store: RunStore) -> None:
    now = int(time.time() * 1000)
    store.beat(beat_of(12, at_ms=now), keep_ms=50)
    deadline = time.monotonic() + 5
    while store.worker_beats() and time.monotonic() < deadline:
        time.sleep(0.05)  # Redis expires the record on its own clock: nothing to wait on

    assert store.worker_beats() == []


def test_a_beat_keeps_per_queue_the_deliveries_its_worker_holds_unacknowledged(store: RunStore) -> None:
    now = int(time.time() * 1000)
    holding = replace(beat_of(13, at_ms=now), unacked={"ns.shop.charge": 3, "ns.shop.ship.p1": 1})
    store.beat(holding, keep_ms=60_000)
    store.beat(beat_of(14, at_ms=now - 1), keep_ms=60_000)

    assert store.worker_beats() == [holding, beat_of(14, at_ms=now - 1)]
    assert [beat.unacked for beat in store.worker_beats()] == [{"ns.shop.charge": 3, "ns.shop.ship.p1": 1}, {}]
