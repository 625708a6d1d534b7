"""Claims that meet Redis's error replies, and completions that meet a stalled Redis (``CLIENT PAUSE``).

A keyed actor (each message published twice) and two-step chains write every effect to a PostgreSQL
table without a unique constraint. Whatever the store answers, no actor runs unguarded (a duplicate
would show as a second row), no run is left running, and every effect happens once. Figures are
printed (``-s``). The pauses stall the whole Redis for 5 s and 30 s: run on a private Redis in
development; in CI the suite has the shared one to itself.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterator
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import dramatiq
import pytest
import redis
from fail_closed_support import Effects
from redis_proxy import ERROR_REPLIES, ErrorProxy

from pipelines import chain, step
from pipelines.app import App
from pipelines.errors import StoreUnavailable
from tests.fixtures import MakeApp, StartWorker

REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
ORDERS = 10
RUNS = 5


def script_sha(name: str) -> bytes:
    text = resources.files("pipelines.store").joinpath("lua", f"{name}.lua").read_text()
    return hashlib.sha1(text.encode()).hexdigest().encode()


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

    parts = urlsplit(REDIS_URL)
    proxy = ErrorProxy((parts.hostname or "127.0.0.1", parts.port or 6379), inject)
    yield proxy
    proxy.close()


def declare(app: App, effects: Effects, *, pause_ms: int = 0) -> dict[str, dramatiq.Actor[Any, Any]]:
    """A keyed ``charge`` and a chain step ``book``; with ``pause_ms``, the first ``book`` to finish
    pauses Redis (``CLIENT PAUSE ... ALL``) right after its effect, so its completion meets the stall."""
    paused = threading.Event()

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda order_id: f"charge-{order_id}", max_retries=3)
    def charge(order_id: int) -> None:
        effects.apply(f"charge-{order_id}")

    @dramatiq.actor(broker=app.broker, max_retries=3)
    def book(tag: str, value: int) -> int:
        effects.apply(f"book-{tag}-{value}")
        if pause_ms and not paused.is_set():
            paused.set()
            redis.Redis.from_url(REDIS_URL).execute_command("CLIENT", "PAUSE", pause_ms, "ALL")  # type: ignore[no-untyped-call]
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
    waited_until = time.monotonic() + timeout_s
    for run in runs:
        while True:
            try:
                run.wait(timeout_s=max(waited_until - time.monotonic(), 0.1))
                break
            except StoreUnavailable:  # this process's reads meet the stall too: wait through it
                assert time.monotonic() < waited_until, f"Redis unavailable for {timeout_s} s"
    expected = {f"charge-{n}" for n in range(ORDERS)} | {f"book-r{n}-{v}" for n in range(RUNS) for v in (0, 1)}
    deadline = threading.Event()
    for _ in range(int(timeout_s * 10)):
        if set(effects.counts()) >= expected:
            break
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
    proxied = f"redis://127.0.0.1:{failing_claims.port}{urlsplit(REDIS_URL).path}"
    app = make_app(store={"url": proxied, "step_lease_s": 8}, worker={"time_limit_s": 5})
    figures = run_scenario(app, start_worker, effects, timeout_s=60)
    print(f"\nfigures: claims meeting {sorted(set(failing_claims.injected))} x2 each: {figures}")

    assert sorted(set(failing_claims.injected)) == sorted(ERROR_REPLIES)
    assert figures == {"runs": RUNS, "succeeded": RUNS, "stuck": 0, "lost": 0, "duplicated": 0, "dead-lettered": 0}


@pytest.mark.parametrize("pause_ms", [5_000, 30_000], ids=["5s", "30s"])
@pytest.mark.timeout(180)
def test_a_completion_that_meets_a_stalled_redis_is_recorded_later_without_running_the_step_again(
    make_app: MakeApp, start_worker: StartWorker, effects: Effects, pause_ms: int
) -> None:
    app = make_app(store={"step_lease_s": 8}, worker={"time_limit_s": 5})
    actors = declare(app, effects, pause_ms=pause_ms)
    figures = drive(app, actors, start_worker, effects, timeout_s=pause_ms / 1000 + 60)
    print(f"\nfigures: CLIENT PAUSE {pause_ms} ms ALL during a completion: {figures}")

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

    parts = urlsplit(REDIS_URL)
    proxy = ErrorProxy((parts.hostname or "127.0.0.1", parts.port or 6379), inject)
    yield proxy
    proxy.close()


@pytest.mark.timeout(120)
def test_a_final_failure_the_store_cannot_record_yet_fails_its_run_later_with_one_dead_letter(
    make_app: MakeApp, start_worker: StartWorker, failing_failures: ErrorProxy
) -> None:
    proxied = f"redis://127.0.0.1:{failing_failures.port}{urlsplit(REDIS_URL).path}"
    app = make_app(store={"url": proxied})

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
