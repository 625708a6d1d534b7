"""Standalone actors run once per idempotency key: duplicates skipped, concurrent copies held off."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import dramatiq

from pipelines.middleware import Idempotency
from pipelines.store import RedisRunStore
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp, Observe, StartWorker

TIMEOUT_S = 30


def idempotency_of(app: Any) -> Idempotency:
    return next(m for m in app.broker.middleware if isinstance(m, Idempotency))


def test_a_message_whose_key_is_done_is_skipped_and_counted(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    charges: Counter[int] = Counter()

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda order_id, **_: f"charge-{order_id}")
    def charge(order_id: int, amount: float) -> None:
        charges[order_id] += 1

    start_worker(app)
    charge.send(1, 9.5)
    charge.send(2, 9.5)
    observer.wait_handled("charge", 2)
    for order_id in (1, 2, 1):
        charge.send(order_id, 9.5)
    observer.wait_handled("charge", 5)

    assert charges == Counter({1: 1, 2: 1})
    assert observer.skipped["charge"] == 3
    assert idempotency_of(app).duplicates_skipped == 3


def test_a_key_given_on_the_message_wins_over_the_actors(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    calls: list[str] = []

    @dramatiq.actor(broker=app.broker, idempotency_key="fixed")
    def note(text: str) -> None:
        calls.append(text)

    start_worker(app)
    note.send_with_options(args=("a",), idempotency_key="k1")
    note.send_with_options(args=("b",), idempotency_key="k1")
    note.send_with_options(args=("c",), idempotency_key="k2")
    observer.wait_handled("note", 3)

    assert sorted(calls) in (["a", "c"], ["b", "c"])


def test_a_copy_of_a_message_in_progress_waits_for_it_and_is_then_skipped(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    entered, release = threading.Event(), threading.Event()
    runs: list[int] = []

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda n: f"export-{n}")
    def export(n: int) -> None:
        runs.append(n)
        entered.set()
        release.wait(TIMEOUT_S)

    start_worker(app)
    message = export.send(7)
    assert entered.wait(TIMEOUT_S)
    app.broker.enqueue(message)  # the same message again, while the first copy runs
    observer.wait_handled("export", 1)  # the copy: put off, not run

    release.set()
    assert runs == [7]
    assert observer.skipped["export"] == 1


def test_a_failure_releases_the_key_so_the_retry_runs(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    attempts: list[int] = []

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda n: f"flaky-{n}", max_retries=2, min_backoff=5)
    def flaky(n: int) -> None:
        attempts.append(n)
        if len(attempts) < 2:
            raise ConnectionError("try again")

    start_worker(app)
    flaky.send(3)
    observer.wait_handled("flaky", 2)

    assert attempts == [3, 3]
    flaky.send(3)
    observer.wait_handled("flaky", 3)
    assert attempts == [3, 3]


@only_on("rabbitmq")
def test_a_done_key_is_kept_for_the_configured_retention(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app(store={"idempotency_retention_s": 120})
    observer = observe(app)

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda: "once")
    def job() -> None:
        pass

    start_worker(app)
    job.send()
    observer.wait_handled("job", 1)

    assert isinstance(app.store, RedisRunStore)
    client: Any = app.store._redis
    key = f"{app.settings.namespace}:idem:job:once"
    assert client.get(key) == b"done"
    assert 0 < client.ttl(key) <= 120
