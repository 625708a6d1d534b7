"""RateSlots, on every backend: slots of a rate limit follow each other at its interval, per key; a
worker takes one before the actor runs, within the limit's window.

The store's clock (Redis's) cannot be driven, so the tests read it: a slot of a key nobody used is
taken at once, at the store's time. Each wait is checked against the readings before and after the
calls, and the limit's interval and grace are long enough (minutes) that no pause of a busy machine
between two calls passes a slot.
"""

from __future__ import annotations

import uuid

from pipelines.store import RateSlots, SlotTake

#: The limit's interval: one slot every ten minutes.
INTERVAL_MS = 600_000
#: How far from its slot a message that holds one still runs in it.
GRACE_MS = 60_000


def take(store: RateSlots, key: str = "rate:send", *, held_ms: int = 0, count: int = 3) -> SlotTake:
    """A slot of a limit of ``count`` per ``count`` intervals (one every interval)."""
    return store.take_slot(
        key,
        interval_ms=INTERVAL_MS,
        window_count=count,
        window_ms=count * INTERVAL_MS,
        held_ms=held_ms,
        grace_ms=GRACE_MS,
    )


def store_now(store: RateSlots) -> int:
    """The store's time (epoch ms): the slot a key nobody used gives at once."""
    return take(store, f"rate:clock:{uuid.uuid4().hex}").slot_ms


def test_a_batch_reserves_consecutive_slots_from_now(store: RateSlots) -> None:
    assert store.reserve_slots("rate:send", count=3, interval_ms=1000) == [0, 1000, 2000]


def test_a_later_reservation_queues_behind_the_earlier_one_and_other_keys_are_free(store: RateSlots) -> None:
    before = store_now(store)
    store.reserve_slots("rate:send", count=3, interval_ms=INTERVAL_MS)

    later = store.reserve_slots("rate:send", count=2, interval_ms=INTERVAL_MS)
    other = store.reserve_slots("rate:fetch", count=1, interval_ms=INTERVAL_MS)
    after = store_now(store)

    # Right behind the three slots reserved first, counted from when it was asked (at most
    # `after - before` later than the first reservation).
    assert 3 * INTERVAL_MS - (after - before) <= later[0] <= 3 * INTERVAL_MS
    assert later[1] - later[0] == INTERVAL_MS
    assert other == [0]


def test_a_message_runs_at_once_then_the_next_waits_for_the_following_slot_which_it_reserves(store: RateSlots) -> None:
    first = take(store)
    second = take(store)
    third = take(store)
    after = store_now(store)

    assert first.wait_ms == 0
    assert second.slot_ms == first.slot_ms + INTERVAL_MS
    assert second.slot_ms - after <= second.wait_ms <= second.slot_ms - first.slot_ms  # counted from its take
    assert third.slot_ms - second.slot_ms == INTERVAL_MS  # behind the slot reserved for the second
    assert take(store, "rate:other").wait_ms == 0


def test_a_message_holding_its_due_slot_runs_although_the_next_free_slot_is_later(store: RateSlots) -> None:
    now = take(store).slot_ms
    waiting = take(store)  # reserves now + one interval

    assert take(store, held_ms=now).wait_ms == 0  # due (within the grace), whatever is reserved after it
    stale = take(store, held_ms=now - 2 * GRACE_MS)
    assert stale.slot_ms == waiting.slot_ms + INTERVAL_MS  # stale: queues like any other
    assert take(store, held_ms=now + 2 * GRACE_MS).wait_ms > 0  # not due: never early


def test_a_full_window_holds_even_a_due_slot_back_until_the_window_has_room(store: RateSlots) -> None:
    now = take(store, count=2).slot_ms
    assert take(store, held_ms=now, count=2).wait_ms == 0

    held_back = take(store, held_ms=now, count=2)
    after = store_now(store)

    window_ms = 2 * INTERVAL_MS
    assert held_back.slot_ms == now + window_ms  # when the first run leaves the window: its slot stays its own
    assert held_back.slot_ms - after <= held_back.wait_ms <= window_ms  # counted from its take
