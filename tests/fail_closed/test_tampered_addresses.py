"""A step message whose address was tampered with neither runs nor decides how its run ends.

A run's plan is stored when it starts: each step's actor and its ancestors. A message that says its step
is the last of its chain (``count`` 1 of a three-step chain), that it has no ancestors (``up: []``), an
index past its count, a frame of another kind, numbers spelled as strings or fractions, objects as step
ids, or another actor is dead-lettered as ``malformed message`` before its actor runs. The run it names
goes on as planned: each of its three steps runs once and it succeeds with their result. Published to
the real RabbitMQ, claimed against the real Redis; figures are printed (``-s``).

A message addressed exactly as the plan has a step, for a step its run has not released yet (the next or
the last step of the chain while the first still runs, or a result carried for the last), is
dead-lettered the same way, on the embedded store, on Redis and on PostgreSQL: a step runs or ends only
once the step before it released it. Its dead letter cannot be replayed into the run either.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import dramatiq
import pytest

from pipelines import chain, step
from pipelines.app import App
from pipelines.broker import ExchangeBroker
from pipelines.errors import CannotReplay
from tests.support.backends import Backend, on
from tests.support.fail_closed.fail_closed_support import RawPublisher, body, wait_until
from tests.support.fixtures import MakeApp, StartWorker

#: A three-step chain's first step: its node and its one ancestor, as the run's plan has them.
FIRST = ("0.0", [["c", "0", 0, 3]])


def tampered(run_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each tampered variant of the first step's message: (actor, its ``pipeline_step`` option)."""
    node, up = FIRST

    def address(node: Any = node, up: Any = up) -> dict[str, Any]:
        return {"run": run_id, "node": node, "up": up}

    return {
        "no ancestors": ("add", address(up=[])),
        "last of its chain": ("add", address(up=[["c", "0", 0, 1]])),
        "index past count": ("add", address(node="0.5", up=[["c", "0", 5, 3]])),
        "parallel, not chain": ("add", address(up=[["p", "0", 0, 3]])),
        "index as text": ("add", address(up=[["c", "0", "0", 3]])),
        "index a fraction": ("add", address(up=[["c", "0", 0.9, 3]])),
        "count as text": ("add", address(up=[["c", "0", 0, "3"]])),
        "object as step id": ("add", address(node={"id": "0.0"})),
        "object as frame node": ("add", address(up=[["c", {"id": "0"}, 0, 3]])),
        "extra ancestor": ("add", address(up=[["c", "0", 0, 3], ["c", "0", 0, 1]])),
        "another actor": ("other", address()),
    }


@pytest.mark.timeout(90)
def test_tampered_step_addresses_are_dead_lettered_and_the_run_goes_on_as_planned(
    make_app: MakeApp, start_worker: StartWorker, raw_publisher: RawPublisher
) -> None:
    app = make_app()
    calls: Counter[int] = Counter()
    lock = threading.Lock()

    @dramatiq.actor(broker=app.broker, actor_name="add", max_retries=0)
    def add(value: int) -> int:
        with lock:
            calls[value] += 1
        return value + 1

    @dramatiq.actor(broker=app.broker, actor_name="other", max_retries=0)
    def other(value: int) -> int:
        return value

    assert isinstance(app.broker, ExchangeBroker)
    app.broker.ensure_topology()  # the queues the tampered copies go to
    variants: dict[str, tuple[str, dict[str, Any]]] = {}

    def publish_tampered(run_id: str, created: bool) -> None:
        """Ahead of the run's own first message (it is recorded, not yet published): they come first."""
        variants.update(tampered(run_id))
        for n, (actor, address) in enumerate(variants.values()):
            options = {"pipeline_step": address, "pipeline_name": "tampered"}
            raw_publisher.publish(
                app.broker.topology.actor_queues[actor],
                body(f"tampered{n}", actor=actor, options=options, args=[1]),
                message_id=f"tampered{n}",
            )

    run = app.start(chain(step(add), step(add), step(add)), args=(1,), on_created=publish_tampered)
    start_worker(app, threads=1)

    status = run.wait(timeout_s=60)
    letters: dict[str, str] = {}

    def all_dead_lettered() -> bool:
        letters.update({letter.id.split(".")[0]: letter.reason.reason for letter in app.dead_letters.list()})
        return all(f"tampered{n}" in letters for n in range(len(variants)))

    wait_until(all_dead_lettered, 30, "every tampered message dead-lettered")
    reasons = Counter(letters.get(f"tampered{n}", "not dead-lettered") for n in range(len(variants)))
    print(
        f"\nfigures: {len(variants)} tampered copies of a three-step chain's first step: run {status.state} "
        f"with {status.result}, step runs {dict(calls)}, dead-lettered {dict(reasons)}"
    )
    assert (status.state, status.result) == ("succeeded", 4)
    assert calls == Counter({1: 1, 2: 1, 3: 1})  # each step once, none of the tampered copies
    assert reasons == Counter({"malformed message": len(variants)})
    assert len(app.dead_letters.list()) == len(variants)


#: Copies addressed as the plan has a step, for steps not due while the first one runs: (step id, its
#: ancestors, the options they add).
NOT_DUE: dict[str, tuple[str, list[Any], dict[str, Any]]] = {
    "the next step": ("0.1", [["c", "0", 1, 3]], {}),
    "the last step": ("0.2", [["c", "0", 2, 3]], {}),
    "a result carried for the last step": ("0.2", [["c", "0", 2, 3]], {"pipeline_result": "100"}),
}


def publish_raw(app: App, request: pytest.FixtureRequest, actor: str, raw: bytes, message_id: str) -> None:
    """Put a body into the actor's queue as any producer could: RabbitMQ's, or the embedded broker's."""
    if isinstance(app.broker, ExchangeBroker):
        publisher: RawPublisher = request.getfixturevalue("raw_publisher")
        publisher.publish(app.broker.topology.actor_queues[actor], raw, message_id=message_id)
    else:
        app.broker.queues[app.broker.actors[actor].queue_name].put(raw)


@pytest.mark.timeout(120)
@on(Backend("memory", "memory"), Backend("rabbitmq", "redis"), Backend("rabbitmq", "postgres"))
def test_a_step_message_that_matches_the_plan_but_is_not_due_is_dead_lettered_and_the_run_goes_on_as_planned(
    make_app: MakeApp, start_worker: StartWorker, request: pytest.FixtureRequest
) -> None:
    app = make_app()
    calls: Counter[int] = Counter()
    lock = threading.Lock()
    first_may_end = threading.Event()

    @dramatiq.actor(broker=app.broker, actor_name="add", max_retries=0)
    def add(value: int) -> int:
        if value == 1:  # the run's first step ends only once the test saw what became of the copies
            first_may_end.wait(60)
        with lock:
            calls[value] += 1
        return value + 1

    if isinstance(app.broker, ExchangeBroker):
        app.broker.ensure_topology()  # the queue the copies go to

    def publish_not_due(run_id: str, created: bool) -> None:
        """Ahead of the run's own first message (it is recorded, not yet published): they come first."""
        for n, (node, up, options) in enumerate(NOT_DUE.values()):
            address = {"run": run_id, "node": node, "up": up}
            raw = body(f"notdue{n}", actor="add", options={"pipeline_step": address, **options}, args=[100])
            publish_raw(app, request, "add", raw, f"notdue{n}")

    run = app.start(chain(step(add), step(add), step(add)), args=(1,), on_created=publish_not_due)
    letters: dict[str, str] = {}

    def settled() -> bool:
        """Every copy dead-lettered, or the run ended (while its first step cannot have)."""
        letters.update({letter.id.split(".")[0]: letter.reason.reason for letter in app.dead_letters.list()})
        return all(f"notdue{n}" in letters for n in range(len(NOT_DUE))) or run.status().state not in (
            "pending",
            "running",
        )

    replays: dict[str, str] = {}
    try:
        start_worker(app, threads=2)  # one thread holds the first step, the other takes the copies
        wait_until(settled, 30, "every copy dead-lettered, or the run ended")
        held = run.status()
        for letter in app.dead_letters.list():  # nor does a replay let one run
            try:
                replays[letter.id.split(".")[0]] = app.dead_letters.replay(letter.id)
            except CannotReplay:
                replays[letter.id.split(".")[0]] = "refused"
        after_replays = run.status()
    finally:
        first_may_end.set()
    status = run.wait(timeout_s=60)
    reasons = Counter(letters.get(f"notdue{n}", "not dead-lettered") for n in range(len(NOT_DUE)))
    print(
        f"\nfigures: {len(NOT_DUE)} copies of steps not due yet, addressed as the plan has them: before its first "
        f"step could end the run was {held.state}, steps {[(s.node, s.state) for s in held.steps]}, dead-lettered "
        f"{dict(reasons)}; then the run {status.state} with {status.result}, step runs {dict(calls)}"
    )
    # Dead-lettered while the run's first step could not end: before it released any other step; and
    # refused a replay. The run goes, its first step not yet claimed or running, none other started.
    assert reasons == Counter({"malformed message": len(NOT_DUE)})
    assert replays == {f"notdue{n}": "refused" for n in range(len(NOT_DUE))}
    for seen in (held, after_replays):
        assert seen.state in ("pending", "running")
        assert [s.node for s in seen.steps] == ["0.0", "0.1", "0.2"]
        assert [s.state for s in seen.steps] in (["pending"] * 3, ["running", "pending", "pending"])
    # Then the run goes on as planned: each step once, none of the copies.
    assert (status.state, status.result) == ("succeeded", 4)
    assert calls == Counter({1: 1, 2: 1, 3: 1})
    assert len(app.dead_letters.list()) == len(NOT_DUE)
