"""StoreLifecycle, on every backend, and what an unreachable Redis answers."""

from __future__ import annotations

import gc
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from pipelines.store import RedisRunStore, StoreLifecycle
from pipelines.store.scripting import _Failed
from pipelines.wire.naming import pipeline_runs_key, recent_runs_key, run_key, running_runs_key
from tests.pipelines.store.conftest import RETENTION_S, NewChord
from tests.support.backends import REDIS_URL


def test_a_store_answers_a_ping_and_closes_more_than_once_and_a_later_call_connects_again(
    store: StoreLifecycle,
) -> None:
    store.ping()

    store.close()
    store.close()
    store.ping()
    store.close()


@pytest.fixture
def redis_store(services: object, store_namespace: str) -> Iterator[RedisRunStore]:
    made = RedisRunStore(url=REDIS_URL, namespace=store_namespace, retention_s=RETENTION_S)
    yield made
    made.delete_namespace()
    made.close()


def test_runs_are_created_and_claimed_after_redis_lost_its_scripts(
    redis_store: RedisRunStore, new_chord: NewChord
) -> None:
    first = new_chord(2)
    assert redis_store.create_runs([first]) == [(first.run_id, True)]
    redis.Redis.from_url(REDIS_URL).script_flush()  # what a restart without persistence leaves

    second, third = new_chord(2), new_chord(2)
    assert redis_store.create_runs([second, third]) == [(second.run_id, True), (third.run_id, True)]
    assert redis_store.create_runs([third]) == [(third.run_id, False)]
    assert redis_store.claim_step(second.run_id, "0.0.0", attempt=1, lease_ms=60_000).kind == "run"


def connections_named(name: str) -> int:
    return sum(1 for client in redis.Redis.from_url(REDIS_URL).client_list() if client["name"] == name)


def test_each_thread_keeps_one_connection_for_its_scripts_closed_when_it_ends_or_the_store_closes(
    redis_store: RedisRunStore, new_chord: NewChord
) -> None:
    run = new_chord(4)
    redis_store.create_runs([run])
    name = f"store-test-{uuid.uuid4().hex[:8]}"
    claimed: list[str] = []
    counted, release = threading.Barrier(5), threading.Event()

    def own_connection() -> None:
        redis_store._scripts._thread_clients.get().client_setname(name)  # type: ignore[union-attr]

    def claim(node: str) -> None:
        own_connection()
        for _ in range(3):  # on the same connection each time
            claimed.append(redis_store.claim_step(run.run_id, node, attempt=1, lease_ms=60_000).kind)
        counted.wait()
        release.wait()

    threads = [threading.Thread(target=claim, args=(f"0.0.{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    counted.wait()
    while_running = connections_named(name)
    release.set()
    for thread in threads:
        thread.join()
    gc.collect()
    after_they_ended = connections_named(name)
    own_connection()
    redis_store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=60_000)
    before_close = connections_named(name)
    redis_store.close()

    assert sorted(set(claimed)) == ["busy", "run"]
    assert claimed.count("run") == 4
    assert (while_running, after_they_ended, before_close) == (4, 0, 1)
    assert connections_named(name) == 0


def test_threads_claiming_at_once_each_get_their_own_reply_or_their_own_scripts_error(
    redis_store: RedisRunStore, new_chord: NewChord, store_namespace: str
) -> None:
    runs = [new_chord(1) for _ in range(8)]
    redis_store.create_runs(runs)
    broken = runs[3].run_id
    redis.Redis.from_url(REDIS_URL).hset(run_key(store_namespace, broken) + ":steps", "0.0.0", "not json")
    start = threading.Barrier(len(runs))
    outcomes: dict[str, object] = {}

    def claim(run_id: str) -> None:
        start.wait(10)
        try:
            outcomes[run_id] = redis_store.claim_step(run_id, "0.0.0", attempt=1, lease_ms=60_000).kind
        except redis.ResponseError as e:
            outcomes[run_id] = e

    threads = [threading.Thread(target=claim, args=(run.run_id,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert isinstance(outcomes.pop(broken), redis.ResponseError)
    assert outcomes == {run.run_id: "run" for run in runs if run.run_id != broken}


def test_a_shared_send_after_redis_lost_its_scripts_loads_them_and_runs_every_call_once(
    redis_store: RedisRunStore, new_chord: NewChord, store_namespace: str
) -> None:
    runs = [new_chord(1) for _ in range(4)]
    redis_store.create_runs(runs)
    redis.Redis.from_url(REDIS_URL).script_flush()  # what a restart without persistence leaves
    claim = redis_store._claim
    calls = [(claim, [run_key(store_namespace, run.run_id)], ["0.0.0", 60_000, 1], False) for run in runs]

    replies = redis_store._scripts._run_together(calls)  # what threads claiming at once send together

    assert [reply[0] for reply in replies] == [b"run"] * len(runs)
    assert [redis_store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=60_000).kind for run in runs] == [
        "busy"
    ] * len(runs)  # each claimed once


def test_pipelines_sent_together_give_each_caller_its_own_replies_or_its_own_error(
    redis_store: RedisRunStore, store_namespace: str
) -> None:
    key = f"{store_namespace}:together"

    def counts(pipe: redis.client.Pipeline) -> None:
        pipe.incr(key)
        pipe.incr(key)

    def not_a_number(pipe: redis.client.Pipeline) -> None:
        pipe.set(f"{key}:text", "x")
        pipe.incr(f"{key}:text")

    def breaks(pipe: redis.client.Pipeline) -> None:
        raise ValueError("cannot fill")

    fills = [counts, not_a_number, breaks, counts]
    replies = redis_store._scripts._execute_together([(fill, False) for fill in fills])

    assert replies[0] == [1, 2]
    assert isinstance(replies[1], _Failed)
    assert isinstance(replies[1].error, redis.ResponseError)
    assert isinstance(replies[2], _Failed)
    assert isinstance(replies[2].error, ValueError)
    assert replies[3] == [3, 4]  # the others' commands went, in order
    redis.Redis.from_url(REDIS_URL).delete(key, f"{key}:text")


def test_threads_creating_runs_at_once_each_get_their_runs(redis_store: RedisRunStore, new_chord: NewChord) -> None:
    runs = [[new_chord(1), new_chord(2)] for _ in range(8)]
    start = threading.Barrier(len(runs))
    created: dict[int, list[tuple[str, bool]]] = {}

    def create(index: int) -> None:
        start.wait(10)
        created[index] = redis_store.create_runs(runs[index])

    threads = [threading.Thread(target=create, args=(index,)) for index in range(len(runs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert created == {index: [(run.run_id, True) for run in pair] for index, pair in enumerate(runs)}
    assert all(redis_store.run_state(run.run_id) is not None for pair in runs for run in pair)


def test_starts_trim_the_run_indexes_once_a_second_not_each_time(
    redis_store: RedisRunStore, new_chord: NewChord, store_namespace: str
) -> None:
    # Three indexes: every run's, its pipeline's and the running runs'. Each is given an entry of a run
    # created long before the retention, which a trim drops: the figures are the test's own keys'.
    client = redis.Redis.from_url(REDIS_URL)
    indexes = [
        recent_runs_key(store_namespace),
        pipeline_runs_key(store_namespace, "chord"),
        running_runs_key(store_namespace),
    ]

    def start_with_an_expired_entry() -> list[bool]:
        """Which indexes a start trimmed."""
        for index in indexes:
            client.zadd(index, {"expired-run": 1})
        redis_store.create_runs([new_chord(1)])
        return [client.zscore(index, "expired-run") is None for index in indexes]

    def trimmed_seconds_ago(seconds: float) -> None:
        """Moves the last trim of each index ``seconds`` into the past (the index keeps it in monotonic time)."""
        maintained = redis_store._index._maintained
        redis_store._index._maintained = dict.fromkeys(maintained, time.monotonic() - seconds)

    first = start_with_an_expired_entry()
    second = start_with_an_expired_entry()
    trimmed_seconds_ago(0.5)
    half_a_second_later = start_with_an_expired_entry()
    trimmed_seconds_ago(1.0)
    a_second_later = start_with_an_expired_entry()

    assert (first, second, half_a_second_later, a_second_later) == ([True] * 3, [False] * 3, [False] * 3, [True] * 3)
