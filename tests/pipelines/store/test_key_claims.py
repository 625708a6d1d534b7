"""KeyClaims, on every backend: an idempotency key is run by one holder, then done or released."""

from __future__ import annotations

import threading

from pipelines.store import KeyClaims

LEASE_MS = 60_000


def test_a_claimed_key_is_busy_for_others_until_its_holder_releases_it(store: KeyClaims) -> None:
    assert store.claim_key("charge-1", holder="worker-a", lease_ms=LEASE_MS) == ("run", 0)

    kind, wait_ms = store.claim_key("charge-1", holder="worker-b", lease_ms=LEASE_MS)
    store.release_key("charge-1", holder="worker-b")  # not its claim: nothing happens
    still_held = store.claim_key("charge-1", holder="worker-b", lease_ms=LEASE_MS)
    store.release_key("charge-1", holder="worker-a")

    assert kind == "busy"
    assert 0 < wait_ms <= LEASE_MS
    assert still_held[0] == "busy"
    assert store.claim_key("charge-1", holder="worker-b", lease_ms=LEASE_MS) == ("run", 0)


def test_a_finished_key_is_done_for_every_later_claim(store: KeyClaims) -> None:
    store.claim_key("charge-2", holder="worker-a", lease_ms=LEASE_MS)

    store.finish_key("charge-2", retention_s=60)
    store.release_key("charge-2", holder="worker-a")  # a late release does not undo it

    assert store.claim_key("charge-2", holder="worker-b", lease_ms=LEASE_MS) == ("done", 0)
    store.finish_key("never-claimed", retention_s=60)
    assert store.claim_key("never-claimed", holder="worker-b", lease_ms=LEASE_MS) == ("done", 0)


def test_a_lapsed_claim_lets_another_holder_run_the_key(store: KeyClaims) -> None:
    store.claim_key("charge-3", holder="worker-a", lease_ms=1)
    threading.Event().wait(0.01)  # let the 1 ms lease lapse

    assert store.claim_key("charge-3", holder="worker-b", lease_ms=LEASE_MS) == ("run", 0)
