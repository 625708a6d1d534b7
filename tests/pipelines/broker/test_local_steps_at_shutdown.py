"""A local step still waiting for a thread when its worker stops is published (handed back), so the next
worker runs it: nothing of it was in RabbitMQ, and without that it would wait for its lease to lapse."""

from __future__ import annotations

import threading
import time

import dramatiq

from pipelines.handling.holds import Holds
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.handling.proxy import WorkQueue
from tests.support.fixtures import MakeApp, StartWorker

TIMEOUT_S = 30


def test_a_local_step_waiting_when_its_worker_stops_is_handed_back_and_runs_on_the_next_worker(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    ran = threading.Event()

    @dramatiq.actor(broker=app.broker, actor_name="later")
    def later() -> None:
        ran.set()

    stopping = start_worker(app, threads=1)
    stopping.pause()  # no thread takes what waits
    holds = Holds(store=app.store, lease_s=20)
    hold = holds.step("a-run", "0.1", 1)
    waiting = LocalDelivery(
        app.broker.prepare(later.message()), holds=holds, hold=hold, after="0.0", chain_started=time.monotonic()
    )
    WorkQueue(stopping).put_first(waiting)
    stopping.stop()

    assert not ran.is_set()
    start_worker(app, threads=1)
    assert ran.wait(TIMEOUT_S), "the local step waiting at the stop was not handed back"
