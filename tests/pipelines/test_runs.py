"""Pipeline runs end to end: chain, fan-out, chord, nesting, failures, cancel, idempotent starts.

Every test runs on each broker kind with its partner store (``tests/support/backends.py``); the core ones,
where the broker's deliveries meet the store's decisions (chains, fan-outs and chords advancing,
duplicated deliveries, failures, retries, cancels, idempotent starts), run on every broker kind with
every store kind (``on_every_backend``), so a new kind of either axis is tried against each of the other.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from typing import Any

import dramatiq
import pytest

from pipelines import chain, chord, fan_out, for_each, group, step
from pipelines.app import App
from pipelines.errors import DefinitionError, RunFailed, RunNotFound, UnknownActor, UnknownPipeline
from tests.support.backends import on_every_backend
from tests.support.broker_witness import PublishCounts
from tests.support.fixtures import MakeApp, Observe, StartWorker

TIMEOUT_S = 30


class Ledger:
    """Counts every actor call, from any worker thread."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def declare_arithmetic(app: App, ledger: Ledger) -> dict[str, dramatiq.Actor[Any, Any]]:
    """A few small actors, each on its own Dramatiq queue or sharing one."""

    @dramatiq.actor(broker=app.broker)
    def add(x: int, y: int = 0) -> int:
        ledger.record("add")
        return x + y

    @dramatiq.actor(broker=app.broker)
    def double(x: int) -> int:
        ledger.record("double")
        return x * 2

    @dramatiq.actor(broker=app.broker, queue_name="other")
    def negate(x: int) -> int:
        ledger.record("negate")
        return -x

    @dramatiq.actor(broker=app.broker)
    def square(x: int) -> int:
        ledger.record("square")
        return x * x

    @dramatiq.actor(broker=app.broker)
    def collect(values: list[Any]) -> list[Any]:
        ledger.record("collect")
        return values

    @dramatiq.actor(broker=app.broker)
    def total(values: list[int]) -> int:
        ledger.record("total")
        return sum(values)

    return {"add": add, "double": double, "negate": negate, "square": square, "collect": collect, "total": total}


@on_every_backend
def test_chain_passes_each_result_to_the_next_step(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)
    start_worker(app)

    run = app.start(chain(step(a["add"], 1), a["double"], a["negate"]), args=(2,))

    assert run.result(timeout_s=TIMEOUT_S) == -6
    status = run.status()
    assert [(s.actor, s.state) for s in status.steps] == [
        ("add", "succeeded"),
        ("double", "succeeded"),
        ("negate", "succeeded"),
    ]
    assert all(s.started_at_ms and s.finished_at_ms and s.finished_at_ms >= s.started_at_ms for s in status.steps)


def test_each_step_names_the_worker_process_and_thread_that_ran_it(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    ran_on: dict[int, str] = {}

    @dramatiq.actor(broker=app.broker)
    def where(x: int) -> int:
        ran_on[x] = threading.current_thread().name
        return x + 1

    start_worker(app, threads=2)

    run = app.start(chain(where, where), args=(0,))

    assert run.result(timeout_s=TIMEOUT_S) == 2
    here = f"{socket.gethostname()}:{os.getpid()}"
    assert [s.worker for s in run.status().steps] == [f"{here}/{ran_on[0]}", f"{here}/{ran_on[1]}"]


@on_every_backend
def test_fan_out_of_three_branches_is_one_publish_and_runs_each_branch_once(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections)
    a = declare_arithmetic(app, ledger)
    start_worker(app)

    published = publishes(app)  # as the broker counts them
    run = app.start(fan_out(a["double"], a["negate"], a["square"]), args=(3,))

    assert run.result(timeout_s=TIMEOUT_S) == [6, -3, 9]
    assert published.count("work") == 1
    assert ledger.calls == Counter({"double": 1, "negate": 1, "square": 1})


@on_every_backend
def test_chord_callback_gets_every_member_result_in_member_order(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)
    start_worker(app)

    run = app.start(chord(for_each(a["square"], range(20)), then=a["collect"]))

    assert run.result(timeout_s=TIMEOUT_S) == [i * i for i in range(20)]
    assert ledger.calls == Counter({"square": 20, "collect": 1})


@on_every_backend
def test_chord_fires_once_when_member_messages_are_delivered_twice(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)
    # Every member message is published twice, as a publisher retrying after a lost confirm would;
    # the copies are in the queues before any worker runs.
    original = app.broker.enqueue_many

    def publish_members_twice(messages: list[dramatiq.Message[Any]], **kwargs: Any) -> Any:
        twice = [m for message in messages for m in ([message] * (2 if message.actor_name == "square" else 1))]
        return original(twice, **kwargs)

    monkeypatch.setattr(app.broker, "enqueue_many", publish_members_twice)
    run = app.start(chord(for_each(a["square"], range(10)), then=a["total"]))
    start_worker(app)

    assert run.result(timeout_s=TIMEOUT_S) == sum(i * i for i in range(10))
    assert ledger.calls["total"] == 1
    assert ledger.calls["square"] == 10
    assert run.status().count("succeeded") == 11


@on_every_backend
def test_a_member_published_again_after_the_chord_completed_does_not_fire_the_callback_again(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    observer = observe(app)
    a = declare_arithmetic(app, ledger)
    sent: list[dramatiq.Message[Any]] = []
    original = app.broker.enqueue_many

    def remember(messages: list[dramatiq.Message[Any]], **kwargs: Any) -> Any:
        sent.extend(messages)
        return original(messages, **kwargs)

    monkeypatch.setattr(app.broker, "enqueue_many", remember)
    start_worker(app)
    run = app.start(chord(for_each(a["square"], range(5)), then=a["total"]))
    assert run.result(timeout_s=TIMEOUT_S) == 30

    replayed = [m for m in sent if m.actor_name == "square"]
    original(replayed)
    observer.wait_handled("square", 10)

    assert observer.skipped["square"] == 5
    assert ledger.calls["total"] == 1
    assert ledger.calls["square"] == 5


@on_every_backend
def test_nested_chain_with_fan_out_and_chord_gives_the_right_result(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)

    @dramatiq.actor(broker=app.broker)
    def scale(factor: int, values: list[int]) -> int:
        ledger.record("scale")
        return factor * sum(values)

    start_worker(app, threads=8)

    # chain(a, fan_out(b, c), chord(group of 50, then=d), e)
    pipeline = chain(
        step(a["add"], 1),  # 2 + 1 = 3
        fan_out(a["double"], a["negate"]),  # [6, -3]
        chord(group(step(scale, i) for i in range(50)), then=a["total"]),  # sum(i * 3) = 3675
        a["negate"],  # -3675
    )
    run = app.start(pipeline, args=(2,))

    assert run.result(timeout_s=TIMEOUT_S) == -3675
    assert ledger.calls == Counter({"add": 1, "double": 1, "negate": 2, "scale": 50, "total": 1})
    assert len(run.status().steps) == 1 + 2 + 50 + 1 + 1


def test_branches_and_members_can_themselves_be_chains(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)
    start_worker(app)

    fanned = app.start(fan_out(chain(a["double"], a["negate"]), a["square"]), args=(3,))
    grouped = app.start(
        chord(group(chain(step(a["add"], i), a["double"]) for i in range(4)), then=a["total"]), args=(1,)
    )

    assert fanned.result(timeout_s=TIMEOUT_S) == [-6, 9]
    assert grouped.result(timeout_s=TIMEOUT_S) == sum((i + 1) * 2 for i in range(4))


def test_a_failing_step_fails_the_run_with_its_error_and_later_steps_never_run(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)

    @dramatiq.actor(broker=app.broker, max_retries=0)
    def explode(x: int) -> int:
        raise RuntimeError(f"bad input {x}")

    start_worker(app)
    run = app.start(chain(a["double"], explode, a["negate"]), args=(4,))

    with pytest.raises(RunFailed) as failed:
        run.result(timeout_s=TIMEOUT_S)
    assert failed.value.step == "0.1"
    assert failed.value.error == "RuntimeError: bad input 8"
    states = [(s.actor, s.state) for s in run.status().steps]
    assert states == [("double", "succeeded"), ("explode", "failed"), ("negate", "skipped")]
    assert ledger.calls["negate"] == 0


@on_every_backend
def test_a_failing_chord_member_fails_the_run_once_and_the_callback_never_fires(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, ledger: Ledger
) -> None:
    app = make_app()
    observer = observe(app)
    a = declare_arithmetic(app, ledger)

    @dramatiq.actor(broker=app.broker, max_retries=0)
    def fragile(x: int) -> int:
        if x == 3:
            raise ValueError("member 3 broke")
        return x

    start_worker(app)
    run = app.start(chord(for_each(fragile, range(6)), then=a["total"]))

    status = run.wait(timeout_s=TIMEOUT_S)
    assert status.state == "failed"
    assert status.failed_step == "0.0.3"
    assert status.error == "ValueError: member 3 broke"
    assert [s.node for s in status.steps if s.state == "failed"] == ["0.0.3"]
    observer.wait_handled("fragile", 6)
    assert ledger.calls["total"] == 0
    assert "total" not in observer.handled


@on_every_backend
def test_a_step_retried_after_a_failure_completes_the_run(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    attempts: Counter[str] = Counter()

    @dramatiq.actor(broker=app.broker, max_retries=2, min_backoff=10, max_backoff=50)
    def flaky(x: int) -> int:
        attempts["flaky"] += 1
        if attempts["flaky"] < 3:
            raise ConnectionError("downstream hiccup")
        return x + 1

    start_worker(app)
    run = app.start(chain(flaky), args=(1,))

    assert run.result(timeout_s=TIMEOUT_S) == 2
    assert attempts["flaky"] == 3
    assert run.status().steps[0].attempts == 3


@on_every_backend
def test_cancel_before_a_step_starts_means_it_never_runs(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, ledger: Ledger
) -> None:
    app = make_app()
    observer = observe(app)
    a = declare_arithmetic(app, ledger)
    entered, release = threading.Event(), threading.Event()

    @dramatiq.actor(broker=app.broker)
    def slow(x: int) -> int:
        entered.set()
        release.wait(TIMEOUT_S)
        return x

    start_worker(app)
    run = app.start(chain(slow, a["double"]), args=(5,))
    assert entered.wait(TIMEOUT_S)

    assert run.cancel() is True
    release.set()
    status = run.wait(timeout_s=TIMEOUT_S)
    observer.wait_handled("slow", 1)

    assert status.state == "cancelled"
    assert ledger.calls["double"] == 0
    assert "double" not in observer.handled
    assert [s.state for s in run.status().steps] == ["succeeded", "skipped"]
    assert run.cancel() is False


@on_every_backend
def test_starting_with_the_same_idempotency_key_returns_the_first_run(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)
    start_worker(app)

    first = app.start(chain(a["double"]), args=(21,), idempotency_key="order-7")
    second = app.start(chain(a["double"]), args=(99,), idempotency_key="order-7")

    assert (first.created, second.created) == (True, False)
    assert second.id == first.id
    assert second.result(timeout_s=TIMEOUT_S) == 42
    assert ledger.calls["double"] == 1
    found = app.run_for_key("order-7")
    assert found is not None
    assert found.id == first.id


def test_registered_pipelines_run_by_name_with_their_arguments(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)
    app.register("double_then_negate", chain(a["double"], a["negate"]))
    app.register("squares", lambda n: chord(for_each(a["square"], range(n)), then=a["total"]))
    start_worker(app)

    assert app.run("double_then_negate", 4).result(timeout_s=TIMEOUT_S) == -8
    assert app.run("squares", n=4).result(timeout_s=TIMEOUT_S) == 14
    assert app.run("squares", 4).status().pipeline == "squares"


def test_unknown_pipeline_unknown_actor_and_arguments_that_do_not_fit_are_refused_at_start(
    make_app: MakeApp, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)
    app.register("squares", lambda n: for_each(a["square"], range(n)))

    with pytest.raises(UnknownPipeline, match=r"No pipeline is registered as 'nope' \(registered: squares\)"):
        app.run("nope")
    with pytest.raises(UnknownActor, match=r"Unknown actor\(s\) 'ghost'"):
        app.start(chain(a["double"], pipeline_step("ghost")))
    with pytest.raises(DefinitionError, match=r"Arguments do not fit step 0.0 \(add\): .*argument"):
        app.start(chain(a["add"]), args=(1, 2, 3))
    with pytest.raises(DefinitionError, match=r"Arguments do not fit step 0.1 \(collect\)"):
        app.start(chain(a["double"], step(a["collect"], 1)), args=(1,))
    with pytest.raises(DefinitionError, match=r"Arguments do not fit pipeline 'squares'"):
        app.run("squares", 1, 2)


def pipeline_step(actor_name: str) -> Any:
    from pipelines.composition import Step

    return Step(actor_name=actor_name)


def test_a_result_over_the_size_limit_fails_the_run_with_advice(make_app: MakeApp, start_worker: StartWorker) -> None:
    app = make_app(store={"max_result_bytes": 1000})

    @dramatiq.actor(broker=app.broker)
    def export(rows: int) -> str:
        return "x" * rows

    start_worker(app)
    run = app.start(chain(export), args=(5000,))

    with pytest.raises(RunFailed, match=r"ResultTooLarge: .* over store.max_result_bytes = 1000. Return an id"):
        run.result(timeout_s=TIMEOUT_S)


def test_run_handles_of_unknown_runs_say_so(make_app: MakeApp) -> None:
    app = make_app()

    with pytest.raises(RunNotFound, match="No run nope in the run store"):
        app.get_run("nope").status()


def test_many_runs_start_together_and_each_completes(
    make_app: MakeApp, start_worker: StartWorker, ledger: Ledger
) -> None:
    app = make_app()
    a = declare_arithmetic(app, ledger)
    start_worker(app)

    runs = app.start_many([chain(step(a["add"], n), a["double"]) for n in range(20)], args=(1,), name="bulk")

    assert [run.result(timeout_s=TIMEOUT_S) for run in runs] == [(n + 1) * 2 for n in range(20)]
    assert {run.status().pipeline for run in runs} == {"bulk"}
    assert len({run.id for run in runs}) == 20


def test_starting_no_runs_starts_none(make_app: MakeApp) -> None:
    app = make_app()

    assert app.start_many([]) == []
