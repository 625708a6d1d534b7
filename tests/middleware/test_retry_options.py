"""Dramatiq's retry options and counts as Dramatiq's ``Retries`` gives them: callbacks, exhaustion, zero backoffs."""

from __future__ import annotations

import itertools
import re
import threading
import time
from typing import Any

import dramatiq
import pytest

from pipelines.app import App
from pipelines.errors import InvalidActorOption
from tests.support.backends import Backend
from tests.support.fixtures import MakeApp, Observe, Observer, StartWorker

TIMEOUT_S = 30


class Calls:
    """Arguments a callback actor received, awaited by count."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._changed = threading.Condition()

    def __call__(self, message: dict[str, Any], data: dict[str, Any]) -> None:
        with self._changed:
            self.calls.append((message, data))
            self._changed.notify_all()

    def wait_for(self, count: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.calls) >= count, TIMEOUT_S), self.calls
            return list(self.calls)


def with_callback(make_app: MakeApp, observe: Observe, name: str) -> tuple[App, Observer, Calls]:
    """An app, its observer, and the calls an actor named ``name`` (a callback target) receives."""
    app = make_app()
    calls = Calls()
    dramatiq.actor(actor_name=name, broker=app.broker)(calls)
    return app, observe(app), calls


def test_on_failure_sees_the_retry_count_dramatiq_gives_it_up_to_max_retries_plus_one(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app, observer, failures = with_callback(make_app, observe, "report_failure")
    before_ms = int(time.time() * 1000)

    @dramatiq.actor(broker=app.broker, max_retries=2, min_backoff=1, max_backoff=5, on_failure="report_failure")
    def flaky() -> None:
        raise ConnectionError("down")

    start_worker(app)
    flaky.send()
    observer.wait_dead_lettered("flaky", 1)

    calls = sorted(failures.wait_for(3), key=lambda call: call[0]["options"]["retries"])
    assert [message["options"]["retries"] for message, _ in calls] == [1, 2, 3]
    assert all(message["options"]["requeue_timestamp"] >= before_ms for message, _ in calls)
    assert [data for _, data in calls] == [{"type": "ConnectionError", "message": "down"}] * 3
    [letter] = app.dead_letters.list("flaky")
    assert (letter.reason.reason, letter.reason.attempts) == ("retries exhausted", 3)


def test_a_message_whose_retries_are_exhausted_is_sent_to_its_on_retry_exhausted_actor(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app, observer, exhausted = with_callback(make_app, observe, "retries_spent")

    @dramatiq.actor(broker=app.broker, max_retries=1, min_backoff=1, on_retry_exhausted="retries_spent")
    def doomed(n: int) -> None:
        raise ConnectionError(f"down {n}")

    start_worker(app)
    sent = doomed.send(5)
    observer.wait_dead_lettered("doomed", 1)

    [(message, data)] = exhausted.wait_for(1)
    assert (message["message_id"], message["args"]) == (sent.message_id, [5])
    assert data == {"retries": 1, "max_retries": 1}
    assert len(app.dead_letters.list("doomed")) == 1


def test_on_retry_exhausted_given_on_a_message_and_refused_errors_are_not_reported(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app, observer, exhausted = with_callback(make_app, observe, "retries_spent")

    @dramatiq.actor(broker=app.broker, max_retries=0, throws=(KeyError,))
    def picky(error: str) -> None:
        raise KeyError(error) if error == "key" else ConnectionError(error)

    start_worker(app)
    picky.send_with_options(args=("key",), on_retry_exhausted="retries_spent")
    picky.send_with_options(args=("connection",), on_retry_exhausted="retries_spent")
    observer.wait_dead_lettered("picky", 2)

    [(message, _)] = exhausted.wait_for(1)
    assert message["args"] == ["connection"]


class RetryDelays(dramatiq.Middleware):
    """The delay (ms) of every retry enqueued, by actor (not its re-enqueue when due, in memory)."""

    def __init__(self) -> None:
        self.delays: dict[str, list[int]] = {}

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        if int(message.options.get("retries", 0)) > 0 and delay is not None:
            self.delays.setdefault(message.actor_name, []).append(int(delay or 0))


def test_zero_backoffs_are_accepted_and_retry_at_the_shortest_delay(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, backend: Backend
) -> None:
    app = make_app()
    observer = observe(app)
    retries = RetryDelays()
    app.broker.add_middleware(retries)
    attempts: list[float] = []

    @dramatiq.actor(broker=app.broker, max_retries=2, min_backoff=0, max_backoff=0)
    def eager() -> None:
        attempts.append(time.monotonic())
        raise ConnectionError("again")

    start_worker(app)
    eager.send()
    observer.wait_dead_lettered("eager", 1)
    eager.send_with_options(min_backoff=0, max_backoff=0, max_retries=0)
    observer.wait_dead_lettered("eager", 2)

    assert len(attempts) == 3 + 1
    # Each retry waits the least there is: 1 ms, which RabbitMQ holds in its shortest delay tier.
    assert retries.delays == {"eager": [1, 1]}
    if backend.broker == "rabbitmq":
        topology = app.broker.topology
        assert topology.delay_tier_for(1) == topology.delay_tiers_ms[0]
        # And never less: each retry ran at least that tier after the attempt before it.
        gaps_ms = [1000 * (later - earlier) for earlier, later in itertools.pairwise(attempts[:3])]
        assert min(gaps_ms) >= topology.delay_tiers_ms[0], gaps_ms


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"on_retry_exhausted": 3}, "on_retry_exhausted=3 must be the name of an actor"),
        ({"max_backoff": -5}, "max_backoff=-5 must be a whole number >= 0"),
    ],
)
def test_bad_retry_options_are_refused_at_declaration(make_app: MakeApp, options: dict[str, Any], error: str) -> None:
    app = make_app()
    with pytest.raises(InvalidActorOption, match=re.escape(error)):
        dramatiq.actor(actor_name="misconfigured", broker=app.broker, **options)(lambda: None)


@pytest.mark.parametrize(
    "profile", [{"profile": "ordered", "ordering_key": "user"}, {}], ids=["ordered-in-place", "guaranteed-delayed"]
)
def test_a_message_failing_every_time_runs_max_retries_plus_one_times_whatever_its_retry_path(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, profile: dict[str, Any]
) -> None:
    app = make_app(retries={"min_backoff_s": 0.01, "max_backoff_s": 0.02})
    observer = observe(app)
    users: list[str] = []

    def stubborn_fn(user: str) -> None:
        users.append(user)
        raise ConnectionError("busy")

    stubborn = dramatiq.actor(actor_name="stubborn", broker=app.broker, max_retries=3, **profile)(stubborn_fn)

    start_worker(app)
    stubborn.send("u1")
    observer.wait_dead_lettered("stubborn", 1)

    assert users == ["u1"] * 4
