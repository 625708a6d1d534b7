"""Runs that nothing advances any more are found by the stall sweep; a healthy long run is never touched.

A step's completion meets an error reply from the store (a proxy answers READONLY to it), so its result
travels with a copy of the message put off in the delay queues; the test then takes that copy away, as
an operator's purge would, or as a dead letter nobody replays. Nothing is left in flight to advance the
run: the sweep publishes its step again (the actor runs a second time, its keyed effect once), or, with
no re-drive allowed, fails the run with the reason, after which replaying the dead letter records the
result it carries without running the actor again. Beside it, a run whose one step runs longer than
the step lease and the stall threshold together is kept alive by its worker and runs once. Effects are
counted in PostgreSQL: every execution (no unique constraint) and the keyed effect (the docs'
``ON CONFLICT (effect_key) DO NOTHING``). Figures are printed (``-s``); about 10 s a case. The two cases
run side by side, each with an app, a worker and tables of its own, in threads of their own from the
module's first test on (``tests/support/overlap.py``).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import partial

import dramatiq
import pika
import pytest

import pipelines
from pipelines import chain, step
from pipelines.app import App, build_app
from pipelines.dead_letters.reasons import DeadLetterReason, now_iso
from pipelines.handling.deferral import STORE_DOWN_RETRY_DELAY_MS
from pipelines.store import RedisRunStore, RunStatus
from pipelines.testing import boot
from pipelines.wire import naming
from tests.conftest import cleanup, settings_for
from tests.support.backends import AMQP_URL, paired
from tests.support.fail_closed.fail_closed_support import Effects
from tests.support.fail_closed.redis_proxy import ERROR_REPLIES, ErrorProxy, error_proxy, script_sha
from tests.support.overlap import side_by_side, start_with_the_first_test

REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
LEASE_S = 2
STALLED_AFTER_S = 4
LONG_STEP_S = 8  # longer than the lease and the stall threshold together


@contextmanager
def effect_tables() -> Iterator[tuple[Effects, Effects]]:
    """Every execution (no unique constraint), and the keyed effects (the docs' primary key)."""
    effects = Effects(f"fc_{uuid.uuid4().hex[:12]}")
    keyed = Effects(f"{effects.table}_keyed", keyed=True)
    try:
        yield effects, keyed
    finally:
        keyed.drop()
        effects.drop()


@contextmanager
def failing_completion() -> Iterator[tuple[ErrorProxy, list[bytes]]]:
    """A proxy to the test Redis that answers READONLY to the first completion (``complete.lua``) of
    the run whose id the test puts in the list it is given with it."""
    sha = script_sha("complete")
    target: list[bytes] = []
    lock = threading.Lock()

    def inject(command: list[bytes]) -> bytes | None:
        if len(command) > 3 and command[0].upper() == b"EVALSHA" and command[1] == sha:
            with lock:
                if target and target[0] in command[3]:
                    target.clear()
                    return ERROR_REPLIES["READONLY"]
        return None

    with error_proxy(REDIS_URL, inject) as proxy:
        yield proxy, target


def watch(app: App) -> RedisRunStore:
    """A store to wait for runs on: the test Redis itself (the proxy does not carry pub/sub)."""
    return RedisRunStore(url=REDIS_URL, namespace=app.settings.namespace, retention_s=3600)


def ended(store: RedisRunStore, run_id: str) -> RunStatus:
    status = store.wait_run(run_id, 60)
    assert status is not None
    return status


def take_carried_copy(app: App, timeout_s: float) -> tuple[bytes, str]:
    """Take the copy of a message put off with its result out of its delay queue (body, message id)."""
    queue = naming.delay_queue(app.settings.namespace, STORE_DOWN_RETRY_DELAY_MS)
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
        channel = connection.channel()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            method, properties, body = channel.basic_get(queue)
            if method is not None:
                channel.basic_ack(method.delivery_tag)
                return body, properties.message_id
            time.sleep(0.05)  # a queue to read, nothing to subscribe to here
    raise AssertionError(f"no copy was put off in {queue} within {timeout_s} s")


@dataclass
class Lost:
    """What became of the stalled run and the long one, once a carried copy was lost."""

    stalled_id: str
    redrives: int
    first: RunStatus
    replayed: dict[str, str]
    stalled_status: RunStatus
    healthy_status: RunStatus
    runs: dict[str, int]
    keyed: dict[str, int]


def lose_a_carried_result(lost: str) -> Lost:
    """A stalled run whose carried copy is ``lost`` (purged, or dead-lettered) beside a long healthy run,
    on an app and an in-process worker of its own; what became of both."""
    redrives = 3 if lost == "purged" else 0  # a dead letter left to replay: the run is failed at once
    with effect_tables() as (effects, keyed_effects), failing_completion() as (proxy, target):
        settings = settings_for(
            paired("rabbitmq"),
            store={
                "url": proxy.url(REDIS_URL),
                "step_lease_s": LEASE_S,
                "stalled_run_after_s": STALLED_AFTER_S,
                "stalled_run_redrives": redrives,
            },
        )
        app = build_app(settings)
        worker: dramatiq.Worker | None = None
        try:

            @dramatiq.actor(broker=app.broker, max_retries=3)
            def book(tag: str, value: int) -> int:
                effects.apply(f"{tag}:{value}")  # every execution
                keyed_effects.apply_once(pipelines.current_effect_key())
                return value + 1

            @dramatiq.actor(broker=app.broker, max_retries=0, timeout_s=LONG_STEP_S * 2)
            def survey(value: int) -> int:
                effects.apply(f"survey:{value}")
                time.sleep(LONG_STEP_S)  # a long step: its lease lapses, its worker keeps its run alive
                return value

            stalled = app.start(chain(step(book, "s"), step(book, "s")), args=(0,))
            target.append(stalled.id.encode())
            healthy = app.start(chain(step(survey)), args=(1,))
            boot(app)  # as the ``start_worker`` fixture does
            worker = dramatiq.Worker(app.broker, worker_threads=4, worker_timeout=100)
            worker.start()
            body, message_id = take_carried_copy(app, timeout_s=30)
            if lost == "dead-lettered":
                reason = DeadLetterReason(
                    reason="could not advance the run", run_id=stalled.id, step="0.0", at=now_iso()
                )
                app.broker.dead_letter(
                    body, message_id=message_id, reason=reason, queue=app.broker.topology.actor_queues["book"]
                )
            with closing(watch(app)) as store:
                first = ended(store, stalled.id)
                replayed = app.dead_letters.replay_all()
                stalled_status = ended(store, stalled.id)
                healthy_status = ended(store, healthy.id)
            return Lost(
                stalled.id,
                redrives,
                first,
                replayed,
                stalled_status,
                healthy_status,
                effects.counts(),
                keyed_effects.counts(),
            )
        finally:
            if worker is not None:
                worker.stop()
            cleanup(app)


@pytest.fixture(scope="module")
def lost_results(services: None) -> Iterator[dict[str, Future[Lost]]]:
    """Both cases, each started in a thread of its own (``tests/support/overlap.py``): their waits for
    leases to lapse and for the long step overlap."""
    with side_by_side({case: partial(lose_a_carried_result, case) for case in ("purged", "dead-lettered")}) as lost:
        yield lost


@pytest.fixture(scope="module", autouse=True)
def _lost_results_from_the_first_test(request: pytest.FixtureRequest) -> None:
    start_with_the_first_test(request, "lost_results")


@pytest.mark.parametrize("lost", ["purged", "dead-lettered"])
@pytest.mark.timeout(120)
def test_a_run_whose_carried_result_is_lost_is_re_driven_or_failed_and_a_long_healthy_run_is_left_alone(
    lost_results: dict[str, Future[Lost]], lost: str
) -> None:
    outcome = lost_results[lost].result()
    first, replayed, stalled_status, healthy_status = (
        outcome.first,
        outcome.replayed,
        outcome.stalled_status,
        outcome.healthy_status,
    )
    runs, stalled_id = outcome.runs, outcome.stalled_id
    figures = {
        "stalled run": first.state,
        "its error": first.error,
        "replayed": sorted(replayed.values()),
        "then": stalled_status.state,
        "executions of its first step": runs["s:0"],
        "keyed effects": len(outcome.keyed),
        "long run": healthy_status.state,
        "its executions": runs["survey:1"],
    }
    print(
        f"\nfigures: a completion refused, its carried copy {lost} (re-drives allowed: {outcome.redrives}): {figures}"
    )

    assert (healthy_status.state, runs["survey:1"]) == ("succeeded", 1)  # never taken for stalled
    assert (stalled_status.state, stalled_status.result) == ("succeeded", 2)
    assert sorted(outcome.keyed) == [f"{stalled_id}:0.0", f"{stalled_id}:0.1"]
    if lost == "purged":  # re-driven: the step whose result was lost ran again, its keyed effect once
        assert (first.state, runs["s:0"], runs["s:1"], replayed) == ("succeeded", 2, 1, {})
    else:  # failed with the reason; the replay recorded the result it carried without running the actor
        assert (first.state, first.failed_step, runs["s:0"], runs["s:1"]) == ("failed", "0.0", 1, 1)
        assert str(first.error).startswith("stalled: nothing advanced it for")
        assert list(replayed.values()) == ["replayed"]
