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
