"""RunSteps, on every backend: runs started, steps claimed, barriers, re-drives, failures, retention."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import pytest

from pipelines.store import NewRun, RedisRunStore, RunSteps, RunStore
from pipelines.store.step_history import HISTORY_ENTRIES
from pipelines.wire.steps import Frame

NewChord = Callable[..., NewRun]
T = TypeVar("T")
LEASE_MS = 60_000
CALLBACK = [Frame("c", "0", 1, 2)]


def member(index: int, members: int) -> list[Frame]:
    """The frames of chord member ``index``: in the parallel ``0.0``, which heads the chain ``0``."""
    return [Frame("p", "0.0", index, members), Frame("c", "0", 0, 2)]


def test_an_idempotency_key_returns_the_run_it_started(store: RunStore, new_chord: NewChord) -> None:
    first = new_chord(2, key="k1")
    second = new_chord(3, key="k1")

    assert store.create_run(first) == (first.run_id, True)
    assert store.create_run(second) == (first.run_id, False)
    assert store.run_for_key("k1") == first.run_id
    kept = store.get_run(first.run_id)
    assert kept is not None
    assert len(kept.steps) == 3  # the first start's two members and callback, not the second's


def test_a_keyed_run_must_have_its_keys_id(store: RunStore, new_chord: NewChord) -> None:
    with pytest.raises(ValueError, match="run_id_for_key"):
        store.create_run(replace(new_chord(1), idempotency_key="k2"))


def test_create_runs_records_each_run_in_one_call_and_a_known_key_returns_its_run(
    store: RunStore, new_chord: NewChord
) -> None:
    first, second, again = new_chord(1, key="batch"), new_chord(1), new_chord(1, key="batch")

    created = store.create_runs([first, second, again])

    assert created == [(first.run_id, True), (second.run_id, True), (first.run_id, False)]
    assert [store.run_state(run.run_id) for run in (first, second)] == ["pending", "pending"]
    assert again.run_id == first.run_id


def test_a_claim_runs_a_step_once_and_holds_it_against_duplicates(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(2)
    store.create_run(run)

    first = store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    duplicate = store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    retry = store.claim_step(run.run_id, "0.0.0", attempt=2, lease_ms=LEASE_MS)

    assert (first.kind, first.attempt) == ("run", 1)
    assert duplicate.kind == "busy"
    assert 0 < duplicate.wait_ms <= LEASE_MS
    assert (retry.kind, retry.attempt) == ("run", 2)
    status = store.get_run(run.run_id)
    assert status is not None
    assert status.state == "running"
    assert (status.steps[0].state, status.steps[0].attempts) == ("running", 2)


def test_an_expired_lease_lets_another_worker_take_the_step(store: RunSteps, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)

    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=1)
    threading.Event().wait(0.01)  # let the 1 ms lease lapse

    assert store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS).kind == "run"


def test_a_step_names_the_worker_whose_claim_ran_its_latest_attempt_and_keeps_it_once_done(
    store: RunStore, new_chord: NewChord
) -> None:
    run = new_chord(2)
    store.create_run(run)

    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS, worker="web-1:41/Thread-1")
    refused = store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS, worker="web-2:42/Thread-3")
    after_refusal = store.get_run(run.run_id)
    store.fail_step(run.run_id, "0.0.0", "ValueError: once", final=False)
    store.claim_step(run.run_id, "0.0.0", attempt=2, lease_ms=LEASE_MS, worker="web-2:42/Thread-3")
    store.complete_step(run.run_id, "0.0.0", member(0, 2), '"a"')
    done = store.get_run(run.run_id)

    assert refused.kind == "busy"
    assert after_refusal is not None
    assert after_refusal.steps[0].worker == "web-1:41/Thread-1"  # a duplicate's refused claim names no one
    assert done is not None
    assert (done.steps[0].state, done.steps[0].attempts, done.steps[0].worker) == ("succeeded", 2, "web-2:42/Thread-3")
    assert done.steps[1].worker is None  # not claimed yet


def test_the_barrier_counts_distinct_members_and_releases_the_callback_with_results_in_order(
    store: RunSteps, new_chord: NewChord
) -> None:
    run = new_chord(3)
    store.create_run(run)
    for index in (2, 0, 1):
        store.claim_step(run.run_id, f"0.0.{index}", attempt=1, lease_ms=LEASE_MS)

    advances = [
        store.complete_step(run.run_id, "0.0.2", member(2, 3), '"c"', trace_parent="00-c"),
        store.complete_step(run.run_id, "0.0.2", member(2, 3), '"c-again"'),
        store.complete_step(run.run_id, "0.0.0", member(0, 3), '"a"', trace_parent="00-a"),
        store.complete_step(run.run_id, "0.0.1", member(1, 3), '"b"'),
        store.complete_step(run.run_id, "0.0.1", member(1, 3), '"b-again"'),
    ]

    # A repeated completion keeps the first result; until the callback starts, a repeat after the
    # barrier is full hands it out again (its claim runs it once), never with other values.
    assert [a.kind for a in advances] == ["waiting", "waiting", "waiting", "start", "start"]
    for release in advances[3:]:
        assert (release.node, release.value_json, release.leaves_json) == ("0.1", '["a","b","c"]', '[{"node": "0.1"}]')
        assert sorted(release.member_trace_parents) == ["00-a", "00-c"]
        assert release.chord_wait_ms is not None
        assert release.chord_wait_ms >= 0


def test_a_one_member_chord_reports_its_release_even_within_the_same_millisecond(
    store: RunSteps, new_chord: NewChord
) -> None:
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)

    # Its only member opens and closes the barrier in one call: no time passes between the two.
    release = store.complete_step(run.run_id, "0.0.0", member(0, 1), "1")
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    done = store.complete_step(run.run_id, "0.1", CALLBACK, "2")

    assert (release.kind, release.chord_wait_ms, release.member_trace_parents) == ("start", 0, ())
    assert (done.kind, done.chord_wait_ms, done.member_trace_parents) == ("done", None, ())


def test_a_re_drive_hands_out_the_continuation_again_only_while_it_has_not_started(
    store: RunStore, new_chord: NewChord
) -> None:
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    assert store.complete_step(run.run_id, "0.0.0", member(0, 1), "7").kind == "start"

    lost_publish = store.complete_step(run.run_id, "0.0.0", member(0, 1), None)
    assert (lost_publish.kind, lost_publish.node, lost_publish.value_json) == ("start", "0.1", "[7]")

    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    assert store.complete_step(run.run_id, "0.0.0", member(0, 1), None).kind == "duplicate"
    done = store.complete_step(run.run_id, "0.1", CALLBACK, "14")
    assert (done.kind, done.value_json) == ("done", "14")
    assert done.run_created_at_ms is not None
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.state, status.result, done.run_created_at_ms) == ("succeeded", 14, status.created_at_ms)


def test_the_first_final_failure_fails_the_run_and_later_steps_are_skipped(
    store: RunStore, new_chord: NewChord
) -> None:
    run = new_chord(3)
    store.create_run(run)
    for index in range(3):
        store.claim_step(run.run_id, f"0.0.{index}", attempt=1, lease_ms=LEASE_MS)

    attempt = store.fail_step(run.run_id, "0.0.1", "ValueError: first", final=False)
    retrying = store.get_run(run.run_id)
    failed_run = store.fail_step(run.run_id, "0.0.1", "ValueError: second", final=True)
    second_failure = store.fail_step(run.run_id, "0.0.2", "ValueError: third", final=True)
    late = store.complete_step(run.run_id, "0.0.0", member(0, 3), "1")
    callback = store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)

    assert retrying is not None
    assert (retrying.steps[1].state, retrying.steps[1].error) == ("retrying", "ValueError: first")
    status = store.get_run(run.run_id)
    assert status is not None
    assert (attempt, failed_run, second_failure) == (None, status.created_at_ms, None)
    assert (status.state, status.failed_step, status.error) == ("failed", "0.0.1", "ValueError: second")
    assert late.kind == "stopped"
    assert (callback.kind, callback.run_state) == ("stopped", "failed")
    assert [s.state for s in status.steps] == ["succeeded", "failed", "failed", "skipped"]


def test_fail_run_fails_a_run_before_any_step_and_leaves_an_ended_run_as_it_was(
    store: RunStore, new_chord: NewChord
) -> None:
    unstarted, cancelled = new_chord(1), new_chord(1)
    store.create_runs([unstarted, cancelled])
    store.cancel_run(cancelled.run_id)

    store.fail_run(unstarted.run_id, "PublishError: the broker refused it")
    store.fail_run(cancelled.run_id, "PublishError: too late")
    store.fail_run("no-such-run", "PublishError: nothing to fail")

    failed = store.get_run(unstarted.run_id)
    assert failed is not None
    assert (failed.state, failed.error, failed.failed_step) == ("failed", "PublishError: the broker refused it", None)
    assert failed.finished_at_ms is not None
    assert [s.state for s in failed.steps] == ["skipped", "skipped"]
    assert store.claim_step(unstarted.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS).kind == "stopped"
    still_cancelled = store.get_run(cancelled.run_id)
    assert still_cancelled is not None
    assert (still_cancelled.state, still_cancelled.error) == ("cancelled", None)
    assert store.get_run("no-such-run") is None


def test_unknown_runs_and_steps_are_reported_missing(store: RunSteps, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)

    assert store.claim_step("no-such-run", "0.0.0", attempt=1, lease_ms=LEASE_MS).kind == "missing"
    assert store.claim_step(run.run_id, "9.9", attempt=1, lease_ms=LEASE_MS).kind == "missing"
    assert store.complete_step("no-such-run", "0.0.0", member(0, 1), "1").kind == "missing"
    assert store.complete_step(run.run_id, "0.0.0", member(0, 1), None).kind == "missing"
    assert store.fail_step("no-such-run", "0.0.0", "ValueError", final=True) is None


def test_every_key_of_a_run_expires_after_the_retention(script_store: RedisRunStore, new_chord: NewChord) -> None:
    store = script_store
    run = new_chord(2, key="ttl")
    store.create_run(run)
    for index in range(2):
        store.claim_step(run.run_id, f"0.0.{index}", attempt=1, lease_ms=LEASE_MS)
        store.complete_step(run.run_id, f"0.0.{index}", member(index, 2), "1", trace_parent=f"00-{index}")
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    store.complete_step(run.run_id, "0.1", CALLBACK, "2")

    client: Any = store._redis
    keys = list(client.scan_iter(match=f"{store._namespace}:*"))
    ttls = {key: client.pttl(key) for key in keys}

    assert len(keys) >= 7  # run, steps, starts, entries, results, barrier and its meta, recent runs, key
    assert all(0 < ttl <= 3600 * 1000 for ttl in ttls.values()), ttls


def race(calls: Sequence[Callable[[], T]]) -> list[T]:
    """The results of ``calls``, each made in a thread of its own, all let go at the same moment."""
    start = threading.Barrier(len(calls))
    results: dict[int, T] = {}

    def call(index: int) -> None:
        start.wait()
        results[index] = calls[index]()

    threads = [threading.Thread(target=call, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[index] for index in range(len(calls))]


def test_copies_of_a_step_claimed_at_once_run_it_once_and_the_others_wait(store: RunStore, new_chord: NewChord) -> None:
    runs = [new_chord(1) for _ in range(5)]  # several rounds: a store's connections may be few at first
    store.create_runs(runs)

    for run in runs:
        claims = race([partial(store.claim_step, run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)] * 8)

        assert sorted((claim.kind, claim.attempt) for claim in claims) == [("busy", 0)] * 7 + [("run", 1)]


def test_members_completed_at_once_release_their_callback_once(store: RunStore, new_chord: NewChord) -> None:
    runs = [new_chord(8) for _ in range(5)]
    store.create_runs(runs)

    for run in runs:
        for index in range(8):
            store.claim_step(run.run_id, f"0.0.{index}", attempt=1, lease_ms=LEASE_MS)
        advances = race([partial(store.complete_step, run.run_id, f"0.0.{i}", member(i, 8), str(i)) for i in range(8)])

        assert sorted(advance.kind for advance in advances) == ["start"] + ["waiting"] * 7
        released = next(advance for advance in advances if advance.kind == "start")
        assert released.value_json == "[0,1,2,3,4,5,6,7]"


def test_a_steps_history_keeps_its_latest_attempts_each_with_its_end(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)
    for attempt in range(1, HISTORY_ENTRIES + 3):
        store.claim_step(run.run_id, "0.1", attempt=attempt, lease_ms=LEASE_MS, worker=f"host:1/{attempt}")
        store.fail_step(run.run_id, "0.1", f"OSError: {attempt}" + "!" * 600, final=False, claim=attempt)
    store.claim_step(run.run_id, "0.1", attempt=HISTORY_ENTRIES + 3, lease_ms=LEASE_MS)

    status = store.get_run(run.run_id)

    assert status is not None
    history = status.steps[1].history
    assert [entry.attempt for entry in history] == list(range(4, HISTORY_ENTRIES + 4))
    assert {(entry.outcome, len(entry.error or "")) for entry in history[:-1]} == {("retrying", 500)}
    assert (history[-1].outcome, history[-1].ended_at_ms, history[-1].worker) == (None, None, None)
    assert status.steps[0].history == ()
