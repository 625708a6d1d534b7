"""Holds, on every backend: a worker renews the leases it holds, and an attempt that lost its claim is fenced."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pipelines.errors import ClaimLost
from pipelines.store import NewRun, RunStore
from pipelines.wire.steps import Frame

NewChord = Callable[..., NewRun]
SHORT_MS = 200
LONG_MS = 60_000
MEMBER = [Frame("p", "0.0", 0, 1), Frame("c", "0", 0, 2)]


def claimed_again(store: RunStore, run_id: str, node: str) -> int:
    """Claim a step as a redelivered copy does (the same attempt) once its lease has lapsed; its claim."""
    deadline = time.monotonic() + 10
    while True:
        claim = store.claim_step(run_id, node, attempt=1, lease_ms=LONG_MS)
        if claim.kind == "run":
            return claim.attempt
        assert claim.kind == "busy", claim
        assert time.monotonic() < deadline, "the lease did not lapse"
        time.sleep(claim.wait_ms / 1000)


def test_renewing_a_held_step_keeps_its_lease_so_a_copy_waits_for_it(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)
    mine = store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=SHORT_MS)

    renewal = store.renew_holds({(run.run_id, "0.0.0"): mine.attempt}, {}, lease_ms=LONG_MS)
    copy = store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LONG_MS)

    assert (renewal.lost_steps, renewal.ended_steps, renewal.lost_keys) == ((), (), ())
    assert copy.kind == "busy"
    assert copy.wait_ms > SHORT_MS  # the renewed lease, not the first one


def test_a_step_claimed_again_after_its_lease_lapsed_is_lost_to_its_first_attempt(
    store: RunStore, new_chord: NewChord
) -> None:
    run = new_chord(1)
    store.create_run(run)
    first = store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=SHORT_MS).attempt
    second = claimed_again(store, run.run_id, "0.0.0")

    renewal = store.renew_holds({(run.run_id, "0.0.0"): first}, {}, lease_ms=LONG_MS)
    late = store.complete_step(run.run_id, "0.0.0", MEMBER, "1", claim=first)
    with pytest.raises(ClaimLost):
        store.fail_step(run.run_id, "0.0.0", "ValueError: late", final=True, claim=first)
    kept = store.get_run(run.run_id)
    assert kept is not None
    state_after_late_ends = (kept.state, next(s.state for s in kept.steps if s.node == "0.0.0"))
    current = store.complete_step(run.run_id, "0.0.0", MEMBER, "2", claim=second)

    assert second == first + 1
    assert renewal.lost_steps == ((run.run_id, "0.0.0"),)
    assert late.kind == "lost"
    assert state_after_late_ends == ("running", "running")
    assert current.kind == "start"  # the chord's callback: the member's own attempt decides
    assert store.step_result(run.run_id, "0.0.0", ("0.0", 0)) == "2"


def test_a_step_that_ended_is_not_renewed_and_not_lost(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)
    claim = store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LONG_MS).attempt
    store.complete_step(run.run_id, "0.0.0", MEMBER, "1", claim=claim)

    renewal = store.renew_holds({(run.run_id, "0.0.0"): claim}, {}, lease_ms=LONG_MS)
    gone = store.renew_holds({("no-such-run", "0.0.0"): 1}, {}, lease_ms=LONG_MS)

    assert (renewal.lost_steps, renewal.ended_steps) == ((), ((run.run_id, "0.0.0"),))
    assert (gone.lost_steps, gone.ended_steps) == ((), (("no-such-run", "0.0.0"),))


def test_renewing_a_held_key_keeps_it_and_a_key_claimed_by_another_holder_is_lost(store: RunStore) -> None:
    store.claim_key("held", holder="a", lease_ms=SHORT_MS)
    store.claim_key("lapsed", holder="a", lease_ms=1)
    deadline = time.monotonic() + 10
    while store.claim_key("lapsed", holder="b", lease_ms=LONG_MS)[0] != "run":
        assert time.monotonic() < deadline, "the key's claim did not lapse"

    renewal = store.renew_holds({}, {"held": "a", "lapsed": "a"}, lease_ms=LONG_MS)
    kind, wait_ms = store.claim_key("held", holder="b", lease_ms=LONG_MS)

    assert renewal.lost_keys == ("lapsed",)
    assert (kind, wait_ms > SHORT_MS) == ("busy", True)


def test_nothing_held_is_no_call_at_all(store: RunStore) -> None:
    renewal = store.renew_holds({}, {}, lease_ms=LONG_MS)

    assert (renewal.lost_steps, renewal.ended_steps, renewal.lost_keys) == ((), (), ())
