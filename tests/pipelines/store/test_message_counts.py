"""MessageCounts, on every backend: each process's counts of a minute add up, per actor, and lapse."""

from __future__ import annotations

import time

from pipelines.store import RunStore
from pipelines.store.counts import MINUTE_MS, ActorCounts, MinuteCounts, minute_of, per_actor


def test_the_counts_of_several_processes_add_up_by_minute_and_actor(store: RunStore) -> None:
    now = minute_of(int(time.time() * 1000))
    before = now - MINUTE_MS
    store.add_counts(
        {before: {"charge": ActorCounts(processed=3, failed=1, total_ms=90, slowest_ms=50)}, now: {}},
        keep_ms=60_000,
    )
    store.add_counts(
        {
            before + 5: {"charge": ActorCounts(processed=2, dead_lettered=1, total_ms=400, slowest_ms=300)},
            now: {"email": ActorCounts(processed=1, total_ms=7, slowest_ms=7)},
        },
        keep_ms=60_000,
    )

    minutes = store.message_counts(before - 2 * MINUTE_MS, now + 10)

    assert [m.minute_ms for m in minutes] == [before - 2 * MINUTE_MS, before - MINUTE_MS, before, now]
    assert minutes[:2] == [MinuteCounts(before - 2 * MINUTE_MS, {}), MinuteCounts(before - MINUTE_MS, {})]
    assert minutes[2] == MinuteCounts(before, {"charge": ActorCounts(5, 1, 1, 490, 300)})
    assert minutes[3] == MinuteCounts(now, {"email": ActorCounts(1, 0, 0, 7, 7)})
    assert per_actor(minutes) == {"charge": ActorCounts(5, 1, 1, 490, 300), "email": ActorCounts(1, 0, 0, 7, 7)}
    assert minutes[2].actors["charge"].mean_s == 0.098


def test_a_minute_past_its_keeping_is_gone(store: RunStore) -> None:
    now = minute_of(int(time.time() * 1000))
    store.add_counts({now: {"charge": ActorCounts(processed=1)}}, keep_ms=50)
    deadline = time.monotonic() + 5
    while store.message_counts(now, now)[0].actors and time.monotonic() < deadline:
        time.sleep(0.05)  # Redis expires the record on its own clock: nothing to wait on

    assert store.message_counts(now, now) == [MinuteCounts(now, {})]
