"""RateSlots, on every backend: slots of a rate limit follow each other at its interval, per key."""

from __future__ import annotations

from pipelines.store import RateSlots


def test_a_batch_reserves_consecutive_slots_from_now(store: RateSlots) -> None:
    assert store.reserve_slots("rate:send", count=3, interval_ms=1000) == [0, 1000, 2000]


def test_a_later_reservation_queues_behind_the_earlier_one_and_other_keys_are_free(store: RateSlots) -> None:
    store.reserve_slots("rate:send", count=3, interval_ms=1000)

    later = store.reserve_slots("rate:send", count=2, interval_ms=1000)
    other = store.reserve_slots("rate:fetch", count=1, interval_ms=1000)

    assert 2000 < later[0] <= 3000
    assert later[1] - later[0] == 1000
    assert other == [0]
