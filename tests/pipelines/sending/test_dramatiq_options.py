"""Every actor and message option of Dramatiq's documentation is taken as Dramatiq takes it, or refused
with a sentence saying what to use instead: none is silently ignored."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
from dramatiq.common import current_millis
from dramatiq.middleware import Shutdown
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

from pipelines import step
from pipelines.errors import DefinitionError
from pipelines.wire.option_values import MalformedOption
from tests.support import first_send_producer
from tests.support.backends import REDIS_URL, only_on
from tests.support.fixtures import MakeApp, Observe, StartWorker
from tests.support.recording import TIMEOUT_S, Recorded

#: Dramatiq's documented actor options (its default middleware), each with a value it takes.
DRAMATIQ_ACTOR_OPTIONS: dict[str, Any] = {
    "max_age": 60_000,
    "time_limit": 10_000,
    "max_retries": 3,
    "min_backoff": 0,
    "max_backoff": 0,
    "retry_when": lambda retries, exception: retries < 2,
    "throws": (KeyError,),
    "on_retry_exhausted": "some_actor",
    "on_success": "some_actor",
    "on_failure": "some_actor",
    "pipe_ignore": True,
    "notify_shutdown": True,
    "priority": 10,
}


@pytest.mark.parametrize(("name", "value"), DRAMATIQ_ACTOR_OPTIONS.items(), ids=list(DRAMATIQ_ACTOR_OPTIONS))
def test_each_documented_dramatiq_actor_option_is_accepted_at_declaration(
    make_app: MakeApp, name: str, value: Any
) -> None:
    app = make_app()

    actor = dramatiq.actor(actor_name="optioned", queue_name="custom", broker=app.broker, **{name: value})(lambda: None)

    assert (actor.priority if name == "priority" else actor.options[name]) == value


def test_broker_priority_is_refused_on_an_actor_with_what_to_use_instead(make_app: MakeApp) -> None:
    app = make_app()

    with pytest.raises(DefinitionError, match=r"Actor 'urgent': broker_priority=5 is not supported.*HIGH_PRIORITY"):
        dramatiq.actor(actor_name="urgent", broker=app.broker, broker_priority=5)(lambda: None)


def test_broker_priority_is_refused_on_a_message_before_it_is_sent(make_app: MakeApp) -> None:
    app = make_app()
    urgent = dramatiq.actor(actor_name="urgent", broker=app.broker)(lambda n: None)

    with pytest.raises(DefinitionError, match=r"Message to 'urgent': broker_priority=9 is not supported"):
        urgent.send_with_options(args=(1,), broker_priority=9)


def test_a_dramatiq_pipeline_of_a_generic_actor_and_a_pipe_ignore_step_runs_as_in_dramatiq(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    seen: list[tuple[str, Any]] = []

    class Double(dramatiq.GenericActor):
        class Meta:
            actor_name = "double"
            broker = app.broker

        def perform(self, n: int) -> int:
            seen.append(("double", n))
            return n * 2

    @dramatiq.actor(broker=app.broker)
    def record(*args: Any) -> None:
        seen.append(("record", args))

    start_worker(app)
    steps = [Double.message(3), record.message(), record.message_with_options(args=("alone",), pipe_ignore=True)]
    dramatiq.pipeline(steps, broker=app.broker).run()  # type: ignore[no-untyped-call]
    observer.wait_handled("record", 2)

    assert seen == [("double", 3), ("record", (6,)), ("record", ("alone",))]


@only_on("rabbitmq")
def test_a_worker_booting_after_set_encoder_says_the_encoder_is_not_used(
    make_app: MakeApp, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    dramatiq.actor(actor_name="plain", broker=app.broker)(lambda: None)
    previous = dramatiq.get_encoder()
    dramatiq.set_encoder(dramatiq.PickleEncoder())
    try:
        with caplog.at_level(logging.WARNING):
            start_worker(app)
    finally:
        dramatiq.set_encoder(previous)

    assert any("set_encoder(PickleEncoder) is not used" in r.getMessage() for r in caplog.records)


def sent_long_ago(message: dramatiq.Message[Any], age_ms: int) -> dramatiq.Message[Any]:
    """``message`` as if it had been sent ``age_ms`` ago."""
    return message.copy(message_timestamp=current_millis() - age_ms)


def test_a_message_older_than_its_max_age_is_dead_lettered_with_the_reason_and_never_runs(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    calls = Recorded()
    fresh_only = dramatiq.actor(actor_name="fresh_only", broker=app.broker, max_age=60_000)(calls.add)

    app.broker.enqueue(sent_long_ago(fresh_only.message("by its actor's max_age"), 120_000))
    app.broker.enqueue(sent_long_ago(fresh_only.message_with_options(args=("by its own",), max_age=1000), 5000))
    fresh_only.send("fresh")
    start_worker(app)
    observer.wait_dead_lettered("fresh_only", 2)
    observer.wait_handled("fresh_only", 3)

    assert calls.values == ["fresh"]
    letters = app.dead_letters.list("fresh_only")
    assert [letter.reason.reason for letter in letters] == ["max age exceeded"] * 2
    assert {letter.reason.error_type for letter in letters} == {"MaxAgeExceeded"}
    assert sorted(re.findall(r"past its max_age of (\d+) ms", " ".join(str(le.reason.error) for le in letters))) == [
        "1000",
        "60000",
    ]
    # A replay is a new send: its age starts again, and it runs.
    [old] = [letter for letter in letters if "60000" in str(letter.reason.error)]
    assert app.dead_letters.replay(old.id) == "replayed"
    assert sorted(calls.wait_for(2)) == ["by its actor's max_age", "fresh"]


#: Actors only the producer declares: about 15 ms of quorum-queue declaration each, here.
NEW_QUEUES = 20


@only_on("rabbitmq")
def test_a_producers_first_send_is_not_aged_by_its_declaring_the_topology(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, namespaces: Callable[[], str]
) -> None:
    worker = make_app(namespace=namespaces())  # the producer's queues are deleted with the namespace
    observer = observe(worker)
    calls = Recorded()
    dramatiq.actor(actor_name="prompt", broker=worker.broker, max_age=first_send_producer.MAX_AGE_MS)(calls.add)
    start_worker(worker)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": worker.settings.namespace,
        "PIPELINES_BROKER__URL": worker.settings.broker.url,
        "PIPELINES_BROKER__DELAY_TIERS_S": json.dumps(worker.settings.broker.delay_tiers_s),
        "PIPELINES_STORE__URL": worker.settings.store.url,
    }

    # A fresh process whose first send declares the queues of its actors, new to RabbitMQ.
    produced = subprocess.run(
        [sys.executable, "-m", first_send_producer.__name__, str(NEW_QUEUES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    declared_ms = json.loads(produced.stdout.splitlines()[-1])["declared_ms"]
    observer.wait_handled("prompt", 1)
    letters = worker.dead_letters.list("prompt")
    print(
        f"figures: a fresh producer's first send declared {NEW_QUEUES} new queues in {declared_ms:.0f} ms; its "
        f"message (max_age {first_send_producer.MAX_AGE_MS} ms) ran {len(calls.values)}, dead letters {len(letters)}"
    )

    assert declared_ms > first_send_producer.MAX_AGE_MS, "the producer declared too fast to test its max_age"
    assert calls.values == ["first"]
    assert letters == []


@only_on("rabbitmq")
def test_a_pipeline_step_past_its_max_age_fails_its_run_naming_the_step(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    max_age_ms = 50
    calls = Recorded()
    slow_to_start = dramatiq.actor(actor_name="slow_to_start", broker=app.broker, max_age=max_age_ms)(calls.add)

    run = app.start(step(slow_to_start, 1))
    sent_ms = current_millis()  # published by now: its stamp is no later (declaring the topology is not its age)
    while current_millis() < sent_ms + 2 * max_age_ms:  # its message is past its age before any worker runs
        time.sleep(0.01)
    start_worker(app)
    status = run.wait(timeout_s=TIMEOUT_S)
    observer.wait_dead_lettered("slow_to_start", 1)

    assert calls.values == []
    assert status.state == "failed"
    assert "MaxAgeExceeded" in str(status.error)
    [letter] = app.dead_letters.list("slow_to_start")
    assert (letter.reason.reason, letter.reason.run_id) == ("max age exceeded", run.id)


@only_on("rabbitmq")
@pytest.mark.parametrize("where", ["actor", "message"])
def test_notify_shutdown_raises_shutdown_in_the_actor_when_its_worker_stops_and_the_message_runs_again(
    make_app: MakeApp, start_worker: StartWorker, where: str
) -> None:
    app = make_app(retries={"max_retries": 3, "min_backoff_s": 0.01, "max_backoff_s": 0.02})
    attempts = Recorded()
    interrupted = Recorded()
    steady_started = Recorded()
    steady_done = Recorded()

    def until_shutdown(n: int) -> None:
        attempts.add(n)
        if len(attempts.values) > 1:
            return  # the retry after the shutdown just ends
        try:
            while True:
                time.sleep(0.01)
        except Shutdown:
            interrupted.add(n)
            raise

    def steady() -> None:
        steady_started.add(1)
        for _ in range(20):
            time.sleep(0.01)
        steady_done.add(1)

    options: dict[str, Any] = {"notify_shutdown": True} if where == "actor" else {}
    notified = dramatiq.actor(actor_name="notified", broker=app.broker, **options)(until_shutdown)
    not_notified = dramatiq.actor(actor_name="not_notified", broker=app.broker)(steady)
    worker = start_worker(app)
    notified.send_with_options(args=(7,), notify_shutdown=True if where == "message" else None)
    attempts.wait_for(1)
    not_notified.send()
    steady_started.wait_for(1)
    worker.stop()

    assert interrupted.values == [7]
    assert steady_done.values == [1]  # an actor without it finishes its work, as in Dramatiq
    start_worker(app)
    assert attempts.wait_for(2) == [7, 7]  # retried, as Dramatiq's Retries retries a Shutdown
    assert app.dead_letters.list("notified") == []


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"throws": (KeyError,)}, r"throws cannot be given with a message: .* Declare it on the actor"),
        ({"retry_when": lambda retries, e: False}, r"retry_when cannot be given with a message"),
        ({"store_results": True}, r"store_results is read by dramatiq\.results\.Results, which this broker does not"),
        ({"result_ttl": 1000}, r"result_ttl is read by dramatiq\.results\.Results"),
        ({"time_limit": 3_600_000}, r"time_limit=3600000 ms is longer than the broker's consumer timeout"),
    ],
    ids=["throws", "retry_when", "store_results", "result_ttl", "time_limit"],
)
def test_a_message_option_that_could_not_work_here_is_refused_at_send_with_what_to_use_instead(
    make_app: MakeApp, options: dict[str, Any], error: str
) -> None:
    app = make_app(broker={"consumer_timeout_s": 60}, worker={"time_limit_s": 30})
    plain = dramatiq.actor(actor_name="plain", broker=app.broker)(lambda: None)

    with pytest.raises(DefinitionError, match=error):
        plain.send_with_options(**options)


@pytest.mark.parametrize(("name", "value"), [("time_limit", "an hour"), ("retries", "two")])
def test_a_time_limit_or_retries_option_that_is_not_a_number_is_refused_at_send_naming_it(
    make_app: MakeApp, name: str, value: str
) -> None:
    app = make_app()
    plain = dramatiq.actor(actor_name="plain", broker=app.broker)(lambda: None)
    options: dict[str, Any] = {name: value}

    with pytest.raises(MalformedOption, match=rf"option '{name}' is '{value}', expected a"):
        plain.send_with_options(**options)


def test_a_long_running_actor_takes_a_message_time_limit_past_the_consumer_timeout(make_app: MakeApp) -> None:
    app = make_app(broker={"consumer_timeout_s": 60}, worker={"time_limit_s": 30})
    export = dramatiq.actor(actor_name="export", broker=app.broker, profile="long_running")(lambda: None)

    assert export.send_with_options(time_limit=3_600_000).options["time_limit"] == 3_600_000


@only_on("rabbitmq")
def test_store_results_works_as_in_dramatiq_once_its_results_middleware_is_added(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    results = RedisBackend(url=REDIS_URL, namespace=f"{app.settings.namespace}-results")
    app.broker.add_middleware(Results(backend=results))  # type: ignore[no-untyped-call]
    add = dramatiq.actor(actor_name="add", broker=app.broker, store_results=True)(lambda x, y: x + y)
    start_worker(app)

    sent = add.send(1, 2)
    with_ttl = add.send_with_options(args=(3, 4), result_ttl=60_000)

    assert sent.get_result(backend=results, block=True, timeout=TIMEOUT_S * 1000) == 3
    assert with_ttl.get_result(backend=results, block=True, timeout=TIMEOUT_S * 1000) == 7
    for key in results.client.scan_iter(match=f"{app.settings.namespace}-results*"):
        results.client.delete(key)
