"""Dead letters: their reasons, and replaying them into their original run."""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter

import dramatiq
import orjson
import pika
import pytest

from pipelines import CannotReplay, DeadLetterError, DeadLetterNotFound, chain, correlation, step
from pipelines.app import App
from pipelines.broker import ExchangeBroker
from pipelines.store.redis import RedisRunStore
from tests.support.backends import Backend, only_on
from tests.support.fail_closed.fail_closed_support import wait_until
from tests.support.fixtures import MakeApp, Observe, StartWorker
from tests.support.recording import Recorded

TIMEOUT_S = 30


def declare_billing(
    app: App, broken: dict[str, bool]
) -> tuple[dramatiq.Actor[[int], int], dramatiq.Actor[[int, int], int], dramatiq.Actor[[int], str]]:
    @dramatiq.actor(broker=app.broker)
    def price(order_id: int) -> int:
        return order_id * 10

    @dramatiq.actor(broker=app.broker, queue_name="billing")
    def bill(fee: int, amount: int) -> int:
        if broken["bill"]:
            raise RuntimeError(f"billing service down for {amount}")
        return amount + fee

    @dramatiq.actor(broker=app.broker)
    def receipt(total: int) -> str:
        return f"receipt for {total}"

    return price, bill, receipt


def test_a_failed_step_is_dead_lettered_with_every_detail_of_why(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, backend: Backend
) -> None:
    app = make_app()
    observer = observe(app)
    broken = {"bill": True}
    price, bill, receipt = declare_billing(app, broken)
    start_worker(app)

    with correlation("checkout-9"):
        run = app.start(chain(price, step(bill, 5), receipt), args=(3,))
    assert run.wait(TIMEOUT_S).state == "failed"
    observer.wait_dead_lettered("bill", 1)

    [letter] = app.dead_letters.list("bill")
    reason = letter.reason
    ns = app.settings.namespace
    assert letter.queue == f"{ns}.billing.bill.dead"
    assert letter.source_queue == f"{ns}.billing.bill"
    assert (reason.reason, reason.error_type, reason.error) == (
        "retries exhausted",
        "RuntimeError",
        "billing service down for 30",
    )
    assert "billing service down" in (reason.traceback or "")
    assert (reason.attempts, reason.actor, reason.correlation_id) == (1, "bill", "checkout-9")
    assert (reason.run_id, reason.step) == (run.id, "0.1")
    assert reason.at.startswith("20")
    if backend.broker == "rabbitmq":
        assert (reason.queue, reason.routing_key) == (f"{ns}.billing.bill", "bill")
    assert letter.message is not None
    assert letter.message.args == (5, 30)
    assert app.dead_letters.show(letter.id).reason == reason


def test_a_step_whose_run_the_store_lost_is_dead_lettered_as_run_not_in_store(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    price, _, _ = declare_billing(app, {"bill": False})
    run = app.start(step(price, 3))
    assert isinstance(app.store, RedisRunStore)
    app.store.delete_namespace()  # the store loses its data while the step waits in its queue

    start_worker(app)
    observer.wait_dead_lettered("price", 1)

    [letter] = app.dead_letters.list("price")
    assert (letter.reason.reason, letter.reason.error_type) == ("run or step not in the run store", "RunNotInStore")
    assert f"of run {run.id} is not in the run store" in (letter.reason.error or "")


def test_a_store_that_loses_its_data_mid_run_dead_letters_each_waiting_step_as_run_not_in_store(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    observer = observe(app)
    gate, in_flight = threading.Event(), Recorded()

    @dramatiq.actor(broker=app.broker)
    def prepare(n: int) -> int:
        return n

    @dramatiq.actor(broker=app.broker)
    def gated(n: int) -> int:
        in_flight.add(n)
        assert gate.wait(TIMEOUT_S), "the test never opened the gate"
        return n

    @dramatiq.actor(broker=app.broker, queue_name="later")
    def finish(n: int) -> int:
        return n + 1

    store = app.store
    assert isinstance(store, RedisRunStore)
    threads = 2
    start_worker(app, threads=threads, queues=set(app.broker.get_declared_queues()) - {"later"})
    # Second steps queued: their first steps ran, and no worker reads their queue yet.
    queued_second = [app.start(chain(prepare, finish), args=(n,)) for n in range(3)]

    def first_steps_ran() -> bool:
        return all(run.status().steps[0].state == "succeeded" for run in queued_second)

    wait_until(first_steps_ran, TIMEOUT_S, "the first steps of the runs whose second steps wait")
    # First steps in flight (every worker thread held at the gate), and more queued behind them.
    in_flight_runs = [app.start(chain(gated, finish), args=(n,)) for n in range(threads)]
    in_flight.wait_for(threads)
    queued_first = [app.start(chain(gated, finish), args=(n,)) for n in range(threads, threads + 3)]

    with caplog.at_level(logging.INFO):
        assert store.delete_namespace() > 0  # the store loses its data mid-run
        gate.set()
        start_worker(app, threads=threads, queues={"later"})
        observer.wait_handled("gated", len(in_flight_runs) + len(queued_first))
        observer.wait_handled("finish", len(queued_second))
        observer.wait_dead_lettered("gated", len(queued_first))
        observer.wait_dead_lettered("finish", len(queued_second))
        after = app.start(chain(prepare, finish), args=(10,))  # the workers still work
        assert after.result(timeout_s=TIMEOUT_S) == 11

    letters = app.dead_letters.list()
    lost = {letter.reason.run_id for letter in letters}
    print(
        f"figures: store deleted with {len(queued_second)} second steps queued, {len(in_flight_runs)} first steps in "
        f"flight, {len(queued_first)} first steps queued: dead letters "
        f"{sorted(Counter((le.reason.reason, le.reason.error_type) for le in letters).items())}"
    )
    assert {(le.reason.reason, le.reason.error_type) for le in letters} == {
        ("run or step not in the run store", "RunNotInStore")
    }
    assert sorted((le.reason.run_id or "", le.reason.step or "") for le in letters) == sorted(
        [(run.id, "0.1") for run in queued_second] + [(run.id, "0.0") for run in queued_first]
    )
    assert lost.isdisjoint(run.id for run in in_flight_runs)  # they ended; their completion found no run to advance
    ended_without_run = sorted(
        r.getMessage().split(" of run ")[1].split(" ")[0]
        for r in caplog.records
        if r.levelno == logging.WARNING and "its run is not in the run store" in r.getMessage()
    )
    assert ended_without_run == sorted(run.id for run in in_flight_runs)  # each said so, once
    assert not [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.CRITICAL]  # no crash
    assert observer.dead_lettered == {"gated": len(queued_first), "finish": len(queued_second)}


def test_replaying_a_fixed_step_completes_its_original_run_once(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    broken = {"bill": True}
    price, bill, receipt = declare_billing(app, broken)
    start_worker(app)
    with correlation("checkout-10"):
        run = app.start(chain(price, step(bill, 5), receipt), args=(4,))
    assert run.wait(TIMEOUT_S).state == "failed"
    observer.wait_dead_lettered("bill", 1)
    [letter] = app.dead_letters.list()

    broken["bill"] = False
    assert app.dead_letters.replay(letter.id) == "replayed"
    with pytest.raises(DeadLetterNotFound):
        app.dead_letters.replay(letter.id)

    status = run.wait(TIMEOUT_S)
    assert (status.state, status.result, status.error) == ("succeeded", "receipt for 45", None)
    assert status.correlation_id == "checkout-10"
    assert [s.state for s in status.steps] == ["succeeded"] * 3
    assert app.dead_letters.list() == []


def test_replay_all_and_purge_work_per_queue(make_app: MakeApp, start_worker: StartWorker, observe: Observe) -> None:
    app = make_app()
    observer = observe(app)

    @dramatiq.actor(broker=app.broker)
    def fragile(n: int) -> None:
        raise ValueError(n)

    @dramatiq.actor(broker=app.broker)
    def brittle(n: int) -> None:
        raise ValueError(n)

    start_worker(app)
    for n in range(3):
        fragile.send(n)
        brittle.send(n)
    observer.wait_dead_lettered("fragile", 3)
    observer.wait_dead_lettered("brittle", 3)

    outcomes = app.dead_letters.replay_all("fragile")
    observer.wait_dead_lettered("fragile", 6)  # still broken: back in the dead-letter queue

    assert sorted(outcomes.values()) == ["replayed"] * 3
    assert len(app.dead_letters.list("fragile")) == 3
    assert app.dead_letters.purge("brittle") == 3
    assert app.dead_letters.list("brittle") == []
    assert len(app.dead_letters.list()) == 3


def test_a_step_of_a_cancelled_run_cannot_be_replayed(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    price, bill, receipt = declare_billing(app, {"bill": True})
    start_worker(app)
    run = app.start(chain(price, step(bill, 1), receipt), args=(1,))
    run.wait(TIMEOUT_S)
    observer.wait_dead_lettered("bill", 1)
    [letter] = app.dead_letters.list()
    # The run was reopened (by another replay, say) and then cancelled by its owner.
    assert app.store.reopen_step(run.id, "0.1")[0] == "reopened"
    assert run.cancel() is True

    with pytest.raises(CannotReplay, match=f"Run {run.id} is cancelled"):
        app.dead_letters.replay(letter.id)
    assert [dead.id for dead in app.dead_letters.list()] == [letter.id]


@only_on("rabbitmq")
def test_a_malformed_dead_letter_is_shown_but_not_replayed(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    app.broker.ensure_topology()
    queue = app.broker.topology.actor_queues["echo"]
    with pika.BlockingConnection(pika.URLParameters(app.settings.broker.url)) as connection:
        connection.channel().basic_publish(
            "", queue, b"{not json", pika.BasicProperties(message_id="junk-1", delivery_mode=2)
        )
    observer = observe(app)
    start_worker(app)
    app.broker.enqueue(app.broker.get_actor("echo").message(1))
    observer.wait_handled("echo", 1)

    letter = app.dead_letters.show("junk-1")
    assert (letter.reason.reason, letter.reason.error_type) == ("malformed message", "MalformedMessage")
    assert letter.message is None
    with pytest.raises(CannotReplay, match="is not a valid message"):
        app.dead_letters.replay("junk-1")
    assert json.loads(json.dumps(letter.reason.__dict__))["actor"] == "echo"


@only_on("rabbitmq")
def test_a_message_published_without_an_id_gets_one_as_a_dead_letter(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    app.broker.ensure_topology()
    queue = app.broker.topology.actor_queues["echo"]
    stray = {"queue_name": "default", "actor_name": "no_such_actor", "args": [], "kwargs": {}, "options": {}}
    with pika.BlockingConnection(pika.URLParameters(app.settings.broker.url)) as connection:
        channel = connection.channel()
        for body in (b"{not json", b"\xff\xfe", orjson.dumps({**stray, "message_id": "stray-7"})):
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))  # no message_id
    observer = observe(app)
    start_worker(app)
    app.broker.enqueue(app.broker.get_actor("echo").message(1))
    observer.wait_handled("echo", 1)

    ids = [letter.id for letter in app.dead_letters.list()]
    assert len(ids) == len(set(ids)) == 3
    assert "stray-7" in ids  # the id the body carries
    assert all(letter_id for letter_id in ids)
    for letter_id in ids:
        assert app.dead_letters.show(letter_id).id == letter_id
    assert app.dead_letters.purge() == 3


def test_a_queue_filter_that_names_nothing_is_an_error_not_an_empty_list(make_app: MakeApp) -> None:
    app = make_app()
    dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)

    assert app.dead_letters.list("echo") == []
    with pytest.raises(DeadLetterError, match=r"No actor or queue named 'ehco' in this namespace"):
        app.dead_letters.list("ehco")


def test_each_dead_letter_is_logged_once_with_its_ids_and_a_dropped_message_is_not(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(profiles={"fire_and_forget_max_retries": 0})
    observer = observe(app)

    @dramatiq.actor(broker=app.broker, throws=(ValueError,))
    def refuse(order_id: int) -> None:
        raise ValueError(f"order {order_id} is bad")

    @dramatiq.actor(broker=app.broker, profile="fire_and_forget")
    def nudge() -> None:
        raise RuntimeError("nobody home")

    start_worker(app)
    with caplog.at_level(logging.INFO, logger="pipelines.middleware.dead_letter"), correlation("audit-7"):
        sent = refuse.send(4)
        nudge.send()
        observer.wait_dead_lettered("refuse", 1)
        observer.wait_dead_lettered("nudge", 1)  # rejected, then dropped

    lines = [r for r in caplog.records if r.name == "pipelines.middleware.dead_letter"]
    assert [r.getMessage() for r in lines] == [
        f"Dead-lettering {sent.message_id} of refuse (permanent error): ValueError: order 4 is bad"
    ]
    assert (lines[0].correlation_id, lines[0].message_id, lines[0].actor, lines[0].attempt) == (  # type: ignore[attr-defined]
        "audit-7",
        sent.message_id,
        "refuse",
        1,
    )
