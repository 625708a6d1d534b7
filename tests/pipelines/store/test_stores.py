"""The run store contract, on Redis and in memory: claims, barriers, re-drives, failures, retention."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from pipelines.plan import Frame
from pipelines.store import MemoryRunStore, NewRun, RedisRunStore, RunStore

REDIS_URL = "redis://127.0.0.1:6379/15"
RETENTION_S = 3600
LEASE_MS = 60_000


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[RunStore]:
    if request.param == "memory":
        yield MemoryRunStore(retention_s=RETENTION_S)
        return
    request.getfixturevalue("services")
    redis_store = RedisRunStore(url=REDIS_URL, namespace=f"t-{uuid.uuid4().hex[:10]}", retention_s=RETENTION_S)
    yield redis_store
    redis_store.delete_namespace()
    redis_store.close()


def chord_run(members: int, *, key: str | None = None) -> NewRun:
    """chain(parallel(members), callback): members 0.0.i, callback 0.1."""
    steps = [(f"0.0.{i}", "member") for i in range(members)] + [("0.1", "callback")]
    return NewRun(
        run_id=uuid.uuid4().hex,
        pipeline="chord",
        steps=steps,
        starts={"0.1": '[{"node": "0.1"}]'},
        entries={"0.1": ["0.1"]},
        idempotency_key=key,
    )


def member_frames(index: int, members: int) -> list[Frame]:
    return [Frame("p", "0.0", index, members), Frame("c", "0", 0, 2)]


CALLBACK_FRAMES = [Frame("c", "0", 1, 2)]


def test_an_idempotency_key_returns_the_run_it_started(store: RunStore) -> None:
    first = chord_run(2, key="k1")
    second = chord_run(2, key="k1")

    assert store.create_run(first) == (first.run_id, True)
    assert store.create_run(second) == (first.run_id, False)
    assert store.run_for_key("k1") == first.run_id
    assert store.get_run(second.run_id) is None


def test_a_claim_runs_a_step_once_and_holds_it_against_duplicates(store: RunStore) -> None:
    run = chord_run(2)
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
    assert status.steps[0].state == "running"


def test_an_expired_lease_lets_another_worker_take_the_step(store: RunStore) -> None:
    run = chord_run(1)
    store.create_run(run)

    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=1)
    threading.Event().wait(0.01)  # let the 1 ms lease lapse

    assert store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS).kind == "run"


def test_the_barrier_counts_distinct_members_and_releases_the_callback_with_results_in_order(
    store: RunStore,
) -> None:
    run = chord_run(3)
    store.create_run(run)
    for index in (2, 0, 1):
        store.claim_step(run.run_id, f"0.0.{index}", attempt=1, lease_ms=LEASE_MS)

    advances = [
        store.complete_step(run.run_id, "0.0.2", member_frames(2, 3), '"c"'),
        store.complete_step(run.run_id, "0.0.2", member_frames(2, 3), '"c-again"'),
        store.complete_step(run.run_id, "0.0.0", member_frames(0, 3), '"a"'),
        store.complete_step(run.run_id, "0.0.1", member_frames(1, 3), '"b"'),
        store.complete_step(run.run_id, "0.0.1", member_frames(1, 3), '"b-again"'),
    ]

    # A repeated completion keeps the first result; until the callback starts, a repeat after the
    # barrier is full hands it out again (its claim runs it once), never with other values.
    assert [a.kind for a in advances] == ["waiting", "waiting", "waiting", "start", "start"]
    for release in advances[3:]:
        assert (release.node, release.value_json, release.leaves_json) == ("0.1", '["a","b","c"]', '[{"node": "0.1"}]')


def test_a_re_drive_hands_out_the_continuation_again_only_while_it_has_not_started(store: RunStore) -> None:
    run = chord_run(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    assert store.complete_step(run.run_id, "0.0.0", member_frames(0, 1), "7").kind == "start"

    lost_publish = store.complete_step(run.run_id, "0.0.0", member_frames(0, 1), None)
    assert (lost_publish.kind, lost_publish.node, lost_publish.value_json) == ("start", "0.1", "[7]")

    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    assert store.complete_step(run.run_id, "0.0.0", member_frames(0, 1), None).kind == "duplicate"
    done = store.complete_step(run.run_id, "0.1", CALLBACK_FRAMES, "14")
    assert (done.kind, done.value_json) == ("done", "14")
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.state, status.result) == ("succeeded", 14)


def test_the_first_final_failure_fails_the_run_and_later_steps_are_skipped(store: RunStore) -> None:
    run = chord_run(3)
    store.create_run(run)
    for index in range(3):
        store.claim_step(run.run_id, f"0.0.{index}", attempt=1, lease_ms=LEASE_MS)

    store.fail_step(run.run_id, "0.0.1", "ValueError: first", final=False)
    retrying = store.get_run(run.run_id)
    store.fail_step(run.run_id, "0.0.1", "ValueError: second", final=True)
    store.fail_step(run.run_id, "0.0.2", "ValueError: third", final=True)
    late = store.complete_step(run.run_id, "0.0.0", member_frames(0, 3), "1")
    callback = store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)

    assert retrying is not None
    assert retrying.steps[1].state == "retrying"
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.state, status.failed_step, status.error) == ("failed", "0.0.1", "ValueError: second")
    assert late.kind == "stopped"
    assert (callback.kind, callback.run_state) == ("stopped", "failed")
    assert [s.state for s in status.steps] == ["succeeded", "failed", "failed", "skipped"]


def test_cancel_ends_a_running_run_once(store: RunStore) -> None:
    run = chord_run(1)
    store.create_run(run)

    assert store.cancel_run(run.run_id) is True
    assert store.cancel_run(run.run_id) is False
    assert store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS).kind == "stopped"
    status = store.get_run(run.run_id)
    assert status is not None
    assert status.state == "cancelled"


def test_unknown_runs_and_steps_are_reported_missing(store: RunStore) -> None:
    run = chord_run(1)
    store.create_run(run)

    assert store.claim_step("no-such-run", "0.0.0", attempt=1, lease_ms=LEASE_MS).kind == "missing"
    assert store.claim_step(run.run_id, "9.9", attempt=1, lease_ms=LEASE_MS).kind == "missing"
    assert store.complete_step("no-such-run", "0.0.0", member_frames(0, 1), "1").kind == "missing"
    assert store.get_run("no-such-run") is None


def test_wait_returns_when_the_run_ends_in_another_thread_and_times_out_otherwise(store: RunStore) -> None:
    run = chord_run(1)
    store.create_run(run)
    changes: list[str] = []

    still_running = store.wait_run(run.run_id, 0.05)
    assert still_running is not None
    assert not still_running.is_final

    timer = threading.Timer(0.2, store.cancel_run, args=(run.run_id,))
    timer.start()
    ended = store.wait_run(run.run_id, 30, on_change=lambda s: changes.append(s.state))
    timer.join()

    assert ended is not None
    assert ended.state == "cancelled"
    assert changes
    assert set(changes) <= {"pending"}


def test_every_redis_key_of_a_run_expires_after_the_retention(services: None) -> None:
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    store = RedisRunStore(url=REDIS_URL, namespace=namespace, retention_s=RETENTION_S)
    run = chord_run(2, key="ttl")
    store.create_run(run)
    for index in range(2):
        store.claim_step(run.run_id, f"0.0.{index}", attempt=1, lease_ms=LEASE_MS)
        store.complete_step(run.run_id, f"0.0.{index}", member_frames(index, 2), "1")
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    store.complete_step(run.run_id, "0.1", CALLBACK_FRAMES, "2")

    client: Any = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{namespace}:*"))
    ttls = [client.pttl(key) for key in keys]
    store.delete_namespace()

    assert len(keys) >= 5
    assert all(0 < ttl <= RETENTION_S * 1000 for ttl in ttls)


def test_run_state_reads_only_the_state(store: RunStore) -> None:
    run = chord_run(2)
    store.create_run(run)
    assert store.run_state(run.run_id) == "pending"

    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    assert store.run_state(run.run_id) == "running"
    store.cancel_run(run.run_id)
    assert store.run_state(run.run_id) == "cancelled"
    assert store.run_state("no-such-run") is None
