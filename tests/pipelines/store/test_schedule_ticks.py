"""ScheduleTicks, on every backend: each tick of a job is claimed once, counted, and remembered as the last."""

from __future__ import annotations

from pipelines.store import ScheduleTicks

MINUTE_MS = 60_000
TICK_MS = 1_764_547_200_000  # a minute boundary


def test_only_the_first_claim_of_a_tick_runs_it_and_every_claim_is_counted(store: ScheduleTicks) -> None:
    assert store.claim_tick("cleanup", TICK_MS, retention_s=600) is True
    assert store.claim_tick("cleanup", TICK_MS, retention_s=600) is False
    assert store.claim_tick("report", TICK_MS, retention_s=600) is True

    assert store.tick_claims("cleanup", TICK_MS) == 2
    assert store.tick_claims("report", TICK_MS) == 1
    assert store.tick_claims("cleanup", TICK_MS + MINUTE_MS) == 0


def test_the_last_tick_is_the_latest_claimed_even_when_an_older_one_comes_late(store: ScheduleTicks) -> None:
    assert store.last_tick("cleanup") is None

    store.claim_tick("cleanup", TICK_MS + MINUTE_MS, retention_s=600)
    store.claim_tick("cleanup", TICK_MS, retention_s=600)

    assert store.last_tick("cleanup") == TICK_MS + MINUTE_MS


def test_a_sweep_hands_out_each_unclaimed_tick_once_whatever_was_claimed_after_it(store: ScheduleTicks) -> None:
    ticks = [TICK_MS + n * MINUTE_MS for n in range(6)]
    assert store.swept_through("cleanup") is None
    assert store.sweep_ticks("cleanup", ticks, cutoff_ms=ticks[5], through_ms=ticks[5]) == []  # never ran
    store.claim_tick("cleanup", ticks[0], retention_s=600)
    assert store.swept_through("cleanup") == ticks[0]
    store.claim_tick("cleanup", ticks[4], retention_s=600)  # ticks 1-3 never came; 4 did

    assert store.sweep_ticks("cleanup", ticks, cutoff_ms=ticks[4], through_ms=ticks[4]) == ticks[1:4]
    assert store.swept_through("cleanup") == ticks[4]
    assert store.sweep_ticks("cleanup", ticks, cutoff_ms=ticks[5], through_ms=ticks[5]) == [ticks[5]]
    assert store.sweep_ticks("cleanup", ticks, cutoff_ms=ticks[5], through_ms=ticks[5]) == []


def test_a_sweep_waits_while_the_tick_after_a_missed_one_is_undecided(store: ScheduleTicks) -> None:
    ticks = [TICK_MS + n * MINUTE_MS for n in range(4)]
    store.claim_tick("cleanup", ticks[0], retention_s=600)

    # Tick 1 was missed, tick 2 is due but within the grace (cutoff before it) and unclaimed.
    assert store.sweep_ticks("cleanup", ticks[:3], cutoff_ms=ticks[1], through_ms=ticks[1]) == []
    # Once tick 2 is past the grace (and tick 3 not yet due), the run of missed ticks is handed out whole.
    assert store.sweep_ticks("cleanup", ticks[:3], cutoff_ms=ticks[2], through_ms=ticks[2]) == ticks[1:3]
    store.claim_tick("cleanup", ticks[3], retention_s=600)
    assert store.sweep_ticks("cleanup", ticks, cutoff_ms=ticks[3], through_ms=ticks[3]) == []
