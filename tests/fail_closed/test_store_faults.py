"""Claims that meet Redis's error replies, completions that meet a stalled Redis (``CLIENT PAUSE``),
keyed messages whose record meets errors for longer than they may be tried again, and the issue's case
at its size: an 8 s pause during 500 three-step chains (about 40 s), then every dead letter replayed.

A keyed actor (each message published twice) and two-step chains write every effect to a PostgreSQL
table without a unique constraint. Whatever the store answers, no actor runs unguarded (a duplicate
would show as a second row), no run is left running, and every effect happens once. Figures are
printed (``-s``). The 8 s pause stalls the whole shared Redis: run on a private Redis in development;
in CI the suite has the shared one to itself. The 5 s and 30 s pauses during a completion each stall a
Redis server of their own, so both run in threads of their own from the module's first test on
(``tests/support/overlap.py``) while the other tests run.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import redis

from pipelines import chain, step
from pipelines.app import App, build_app
from pipelines.errors import RunTimeout, StoreUnavailable
from tests.conftest import cleanup, settings_for
from tests.support.backends import paired
from tests.support.fail_closed.fail_closed_support import Effects, Ledger
from tests.support.fail_closed.redis_proxy import ERROR_REPLIES, ErrorProxy, error_proxy, script_sha
from tests.support.fixtures import MakeApp, StartWorker
from tests.support.in_process_workers import InProcessWorkers
from tests.support.overlap import side_by_side, start_with_the_first_test
from tests.support.redis_servers import Server

REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
ORDERS = 10
RUNS = 5


@pytest.fixture
def failing_claims() -> Iterator[ErrorProxy]:
    """A proxy to the test Redis whose first claims (of keys and of steps) get each error reply twice."""
    claims = {script_sha("claim"), script_sha("key_claim")}
    errors = [reply for reply in ERROR_REPLIES.values() for _ in range(2)]
    lock = threading.Lock()

    def inject(command: list[bytes]) -> bytes | None:
        if len(command) > 1 and command[0].upper() == b"EVALSHA" and command[1] in claims:
            with lock:
                return errors.pop(0) if errors else None
        return None

    with error_proxy(REDIS_URL, inject) as proxy:
        yield proxy


def declare(
    app: App, effects: Effects, *, pause_ms: int = 0, pause_url: str = REDIS_URL
) -> dict[str, dramatiq.Actor[Any, Any]]:
    """A keyed ``charge`` and a chain step ``book``; with ``pause_ms``, the first ``book`` to finish
    pauses the Redis at ``pause_url`` (``CLIENT PAUSE ... ALL``, the app's store) right after its effect,
    so its completion meets the stall."""
    paused = threading.Event()

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda order_id: f"charge-{order_id}", max_retries=3)
    def charge(order_id: int) -> None:
        effects.apply(f"charge-{order_id}")

    @dramatiq.actor(broker=app.broker, max_retries=3)
    def book(tag: str, value: int) -> int:
        effects.apply(f"book-{tag}-{value}")
        if pause_ms and not paused.is_set():
            paused.set()
            redis.Redis.from_url(pause_url).execute_command("CLIENT", "PAUSE", pause_ms, "ALL")  # type: ignore[no-untyped-call]
        return value + 1

    return {"charge": charge, "book": book}


def run_scenario(app: App, start_worker: StartWorker, effects: Effects, timeout_s: float) -> dict[str, Any]:
    actors = declare(app, effects)
    return drive(app, actors, start_worker, effects, timeout_s)


def drive(
    app: App, actors: dict[str, dramatiq.Actor[Any, Any]], start_worker: StartWorker, effects: Effects, timeout_s: float
) -> dict[str, Any]:
    for order_id in range(ORDERS):
        actors["charge"].send(order_id)
        actors["charge"].send(order_id)  # a publisher's retry: the same key twice
    runs = [
        app.start(chain(step(actors["book"], f"r{n}"), step(actors["book"], f"r{n}")), args=(0,)) for n in range(RUNS)
    ]
    start_worker(app)
    expected = {f"charge-{n}" for n in range(ORDERS)} | {f"book-r{n}-{v}" for n in range(RUNS) for v in (0, 1)}
    return settle(app, runs, effects, expected, timeout_s=timeout_s)


def settle(app: App, runs: list[Any], effects: Effects, expected: set[str], *, timeout_s: float) -> dict[str, Any]:
    """Wait for every run to end (through a stalled store too) and the expected effects, then count what
    became of them."""
    waited_until = time.monotonic() + timeout_s
    for run in runs:
        while True:
            try:
                run.wait(timeout_s=max(waited_until - time.monotonic(), 0.1))
                break
            except StoreUnavailable:  # this process's reads meet the stall too: wait through it
                assert time.monotonic() < waited_until, f"Redis unavailable for {timeout_s} s"
            except RunTimeout:
                break  # counted as stuck below
    deadline = threading.Event()
    while not set(effects.counts()) >= expected and time.monotonic() < waited_until:
        deadline.wait(0.1)  # effects land in PostgreSQL: nothing to subscribe to
    counts = effects.counts()
    states = [run.status().state for run in runs]
    return {
        "runs": len(runs),
        "succeeded": states.count("succeeded"),
        "stuck": states.count("running") + states.count("pending"),
        "lost": len(expected - set(counts)),
        "duplicated": sum(count - 1 for count in counts.values()),
        "dead-lettered": len(app.dead_letters.list(limit=1000)),
    }


@pytest.mark.timeout(120)
def test_claims_that_meet_redis_error_replies_put_messages_off_and_no_effect_runs_twice(
    make_app: MakeApp, start_worker: StartWorker, effects: Effects, failing_claims: ErrorProxy
) -> None:
    app = make_app(store={"url": failing_claims.url(REDIS_URL), "step_lease_s": 8}, worker={"time_limit_s": 5})
    figures = run_scenario(app, start_worker, effects, timeout_s=60)
    print(f"\nfigures: claims meeting {sorted(set(failing_claims.injected))} x2 each: {figures}")

    assert sorted(set(failing_claims.injected)) == sorted(ERROR_REPLIES)
    assert figures == {"runs": RUNS, "succeeded": RUNS, "stuck": 0, "lost": 0, "duplicated": 0, "dead-lettered": 0}


@pytest.fixture
def failing_failures() -> Iterator[ErrorProxy]:
    """A proxy to the test Redis whose first two records of a failed step (``fail.lua``) get READONLY."""
    fail = script_sha("fail")
    errors = [ERROR_REPLIES["READONLY"]] * 2
    lock = threading.Lock()

    def inject(command: list[bytes]) -> bytes | None:
        if len(command) > 1 and command[0].upper() == b"EVALSHA" and command[1] == fail:
            with lock:
                return errors.pop(0) if errors else None
        return None

    with error_proxy(REDIS_URL, inject) as proxy:
        yield proxy


@pytest.mark.timeout(120)
def test_a_final_failure_the_store_cannot_record_yet_fails_its_run_later_with_one_dead_letter(
    make_app: MakeApp, start_worker: StartWorker, failing_failures: ErrorProxy
) -> None:
    app = make_app(store={"url": failing_failures.url(REDIS_URL)})

    @dramatiq.actor(broker=app.broker, max_retries=0)
    def refund(order_id: int) -> int:
        raise ValueError(f"order {order_id} was never charged")

    @dramatiq.actor(broker=app.broker)
    def notify(value: int) -> None:
        raise AssertionError("a step after a failed one never runs")

    start_worker(app)
    run = app.start(chain(step(refund, 7), step(notify)))
    status = run.wait(timeout_s=60)
    letters: list[Any] = []
    deadline = time.monotonic() + 30
    while not letters and time.monotonic() < deadline:  # published once the failure is recorded
        letters = app.dead_letters.list()
        time.sleep(0.05)

    assert failing_failures.injected == ["READONLY", "READONLY"]
    assert (status.state, status.failed_step) == ("failed", "0.0")
    assert status.error == "ValueError: order 7 was never charged"
    assert [(letter.reason.reason, letter.reason.error_type, letter.reason.error) for letter in letters] == [
        ("retries exhausted", "ValueError", "order 7 was never charged")
    ]


#: Seconds for which the records of an idempotency key done get READONLY: longer than a key claimed
#: under KEY_LEASE_S is tried again (its lease less the time the copy that carries it takes back).
KEY_RECORD_ERRORS_S = 3.5
KEY_LEASE_S = 12


@pytest.fixture
def failing_key_records() -> Iterator[ErrorProxy]:
    """A proxy to the test Redis that answers READONLY to every record of an idempotency key done (the
    ``key_finish`` script, by its SHA) for ``KEY_RECORD_ERRORS_S`` from that key's first one."""
    first: dict[bytes, float] = {}
    lock = threading.Lock()
    script = resources.files("pipelines.store").joinpath("lua", "key_finish.lua").read_bytes()
    sha = hashlib.sha1(script).hexdigest().encode()

    def inject(command: list[bytes]) -> bytes | None:
        if len(command) > 3 and command[0].upper() == b"EVALSHA" and command[1] == sha:
            with lock:
                if time.monotonic() - first.setdefault(command[3], time.monotonic()) < KEY_RECORD_ERRORS_S:
                    return ERROR_REPLIES["READONLY"]
        return None

    with error_proxy(REDIS_URL, inject) as proxy:
        yield proxy


@pytest.mark.timeout(120)
def test_a_keyed_message_whose_record_meets_store_errors_carries_it_and_its_duplicate_never_runs(
    make_app: MakeApp,
    start_worker: StartWorker,
    effects: Effects,
    failing_key_records: ErrorProxy,
    ledger: Callable[[App], Ledger],
) -> None:
    app = make_app(store={"url": failing_key_records.url(REDIS_URL), "step_lease_s": KEY_LEASE_S})
    seen = ledger(app)

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda order_id: f"charge-{order_id}", max_retries=3)
    def charge(order_id: int) -> None:
        effects.apply(f"charge-{order_id}")

    for order_id in range(ORDERS):
        charge.send(order_id)
        charge.send(order_id)  # a publisher's retry: put off while the first holds the key, then skipped
    start_worker(app)
    # Each key: one delivery ran, a copy carried its record, and the duplicate was skipped once recorded.
    seen.wait(lambda: sum(seen.carried.values()) >= ORDERS and sum(seen.dropped.values()) >= 2 * ORDERS, 60)
    counts = effects.counts()
    figures = {
        "orders": ORDERS,
        "ran": sum(seen.ran.values()),
        "carried": sum(seen.carried.values()),
        "lost": len({f"charge-{n}" for n in range(ORDERS)} - set(counts)),
        "duplicated": sum(count - 1 for count in counts.values()),
        "dead-lettered": len(app.dead_letters.list()),
    }
    print(f"\nfigures: records of keys done refused for {KEY_RECORD_ERRORS_S} s (lease {KEY_LEASE_S} s): {figures}")

    assert failing_key_records.injected.count("READONLY") > ORDERS  # each key was tried more than once
    assert figures == {
        "orders": ORDERS,
        "ran": ORDERS,
        "carried": ORDERS,
        "lost": 0,
        "duplicated": 0,
        "dead-lettered": 0,
    }


#: The issue's case: an 8 s pause during 500 three-step chains (6 runs were left running, 6 steps
#: dead-lettered, 6 effects missing until replayed, and the replay ran the actor a second time).
LOAD_CHAINS = 500
LOAD_STEPS = 3
LOAD_PAUSE_MS = 8_000


@pytest.mark.timeout(180)
def test_a_pause_during_500_three_step_chains_strands_loses_and_doubles_nothing_and_no_replay_runs_again(
    make_app: MakeApp, start_worker: StartWorker, effects: Effects, ledger: Callable[[App], Ledger]
) -> None:
    app = make_app(store={"step_lease_s": 8}, worker={"time_limit_s": 5})
    seen = ledger(app)

    @dramatiq.actor(broker=app.broker, max_retries=3)
    def leg(tag: str, value: int) -> int:
        effects.apply(f"{tag}:{value}")
        return value + 1

    began = time.monotonic()
    runs = []
    for first in range(0, LOAD_CHAINS, 100):
        chains = [chain(*[step(leg, f"c{n}")] * LOAD_STEPS) for n in range(first, first + 100)]
        runs += app.start_many(chains, args=(0,))
    start_worker(app, threads=8)
    expected = {f"c{n}:{value}" for n in range(LOAD_CHAINS) for value in range(LOAD_STEPS)}
    # Mid-load: once a third of the steps have applied their effect, the whole Redis stops for 8 s.
    seen.wait(lambda: sum(seen.ran.values()) >= len(expected) // 3, 60)
    redis.Redis.from_url(REDIS_URL).execute_command("CLIENT", "PAUSE", LOAD_PAUSE_MS, "ALL")  # type: ignore[no-untyped-call]
    figures = settle(app, runs, effects, expected, timeout_s=120)
    figures["carried"] = sum(seen.carried.values())
    # Replaying every dead letter (none is expected) must not run an actor again, nor leave a run going.
    handled = seen.ran + seen.dropped
    replayed = app.dead_letters.replay_all()
    seen.wait(lambda: all(seen.ran[i] + seen.dropped[i] > handled[i] for i in replayed), 30)
    after = settle(app, runs, effects, expected, timeout_s=30)
    figures["seconds"] = round(time.monotonic() - began, 1)
    print(f"\nfigures: CLIENT PAUSE {LOAD_PAUSE_MS} ms ALL during {LOAD_CHAINS} chains x {LOAD_STEPS} steps: {figures}")
    print(f"figures: after replaying {len(replayed)} dead letter(s): {after}")

    settled = {"runs": LOAD_CHAINS, "succeeded": LOAD_CHAINS, "stuck": 0, "lost": 0, "duplicated": 0}
    assert {key: figures[key] for key in settled} == settled
    assert figures["dead-lettered"] == 0
    assert {key: after[key] for key in settled} == settled  # a replay ran nothing a second time


#: How long Redis stands still when the first step's completion comes (the step lease is 8 s).
PAUSES_MS = (5_000, 30_000)


def stall_a_completion(pause_ms: int, directory: Path) -> dict[str, Any]:
    """Keyed messages and chains on a worker whose store is a Redis server of its own (in ``directory``),
    paused for ``pause_ms`` when the first step finishes; what became of them."""
    server = Server(directory)
    effects = Effects(f"fc_{uuid.uuid4().hex[:12]}")
    app = build_app(
        settings_for(paired("rabbitmq"), store={"url": server.url, "step_lease_s": 8}, worker={"time_limit_s": 5})
    )
    workers = InProcessWorkers()
    try:
        actors = declare(app, effects, pause_ms=pause_ms, pause_url=server.url)
        return drive(app, actors, workers.start, effects, timeout_s=pause_ms / 1000 + 60)
    finally:
        workers.stop_all()
        cleanup(app)
        effects.drop()
        server.stop()


@pytest.fixture(scope="module")
def stalled_completions(
    services: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[int, Future[dict[str, Any]]]]:
    """Each pause's case, started in a thread of its own; what became of its work, by pause."""
    directory = tmp_path_factory.mktemp("stalled_completions")
    cases = {pause: partial(stall_a_completion, pause, directory / f"{pause}ms") for pause in PAUSES_MS}
    with side_by_side(cases) as stalled:
        yield stalled


@pytest.fixture(scope="module", autouse=True)
def _stalled_completions_from_the_first_test(request: pytest.FixtureRequest) -> None:
    start_with_the_first_test(request, "stalled_completions")


@pytest.mark.parametrize("pause_ms", PAUSES_MS, ids=["5s", "30s"])
@pytest.mark.timeout(180)
def test_a_completion_that_meets_a_stalled_redis_is_recorded_later_without_running_the_step_again(
    stalled_completions: dict[int, Future[dict[str, Any]]], pause_ms: int
) -> None:
    figures = stalled_completions[pause_ms].result()
    print(f"\nfigures: CLIENT PAUSE {pause_ms} ms ALL during a completion: {figures}")

    assert figures == {"runs": RUNS, "succeeded": RUNS, "stuck": 0, "lost": 0, "duplicated": 0, "dead-lettered": 0}
