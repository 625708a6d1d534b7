"""RateSlots, on every backend: slots of a rate limit follow each other at its interval, per key; a
worker takes one before the actor runs, within the limit's window."""

from __future__ import annotations

from pipelines.store import RateSlots, SlotTake


def test_a_batch_reserves_consecutive_slots_from_now(store: RateSlots) -> None:
    assert store.reserve_slots("rate:send", count=3, interval_ms=1000) == [0, 1000, 2000]


def test_a_later_reservation_queues_behind_the_earlier_one_and_other_keys_are_free(store: RateSlots) -> None:
    store.reserve_slots("rate:send", count=3, interval_ms=1000)

    later = store.reserve_slots("rate:send", count=2, interval_ms=1000)
    other = store.reserve_slots("rate:fetch", count=1, interval_ms=1000)

    assert 2000 < later[0] <= 3000
    assert later[1] - later[0] == 1000
    assert other == [0]


def take(store: RateSlots, key: str = "rate:send", *, held_ms: int = 0, count: int = 3) -> SlotTake:
    """A slot of a limit of ``count`` per ``count`` s (one every second)."""
    return store.take_slot(
        key, interval_ms=1000, window_count=count, window_ms=count * 1000, held_ms=held_ms, grace_ms=200
    )


def test_a_message_runs_at_once_then_the_next_waits_for_the_following_slot_which_it_reserves(store: RateSlots) -> None:
    first = take(store)
    second = take(store)
    third = take(store)

    assert first.wait_ms == 0
    assert 900 < second.wait_ms <= 1000
    assert third.slot_ms - second.slot_ms == 1000  # behind the slot reserved for the second
    assert take(store, "rate:other").wait_ms == 0


def test_a_message_holding_its_due_slot_runs_although_the_next_free_slot_is_later(store: RateSlots) -> None:
    now = take(store).slot_ms
    waiting = take(store)  # reserves now + 1 s

    assert take(store, held_ms=now).wait_ms == 0  # due (within the grace), whatever is reserved after it
    assert take(store, held_ms=now - 5000).slot_ms == waiting.slot_ms + 1000  # stale: queues like any other
    assert take(store, held_ms=now + 5000).wait_ms > 0  # not due: never early


def test_a_full_window_holds_even_a_due_slot_back_until_the_window_has_room(store: RateSlots) -> None:
    now = take(store, count=2).slot_ms
    assert take(store, held_ms=now, count=2).wait_ms == 0

    held_back = take(store, held_ms=now, count=2)

    assert 1900 < held_back.wait_ms <= 2000  # the first run leaves the 2 s window then
    assert held_back.slot_ms - now <= 2000  # its slot stays its own: no new slot reserved behind the others
