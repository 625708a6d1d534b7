"""A worker that dies or freezes inside a step, with the shipped leases and time limits: the step runs
again within the lease bound, nothing is lost, and an attempt that lost its step cannot end it.

Each test prints a ``figures:`` line (how long after the SIGKILL each case ran again; how long after the
SIGSTOP the other worker finished each run, and how many late ends were refused); run with ``-s``.

Each test waits out the shipped lease once. The frozen worker's scenario runs in a thread of its own,
from the module's first test on, in a namespace of its own with workers of its own: its wait overlaps
the killed worker's, and its test checks what it saw.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipelines import chain, chord, group, step
from pipelines.config.sections import StoreConfig
from pipelines.runs import Run
from tests.faults.conftest import scenario
from tests.support.faults.fault_scenario import Fault, Workers
from tests.support.housekeeping import fresh_namespace
from tests.support.overlap import in_background, start_with_the_first_test

#: What a killed worker's step waits for at most, counted from the SIGKILL: the rest of its lease
#: (``store.step_lease_s``, renewed each quarter of it while the worker lived), then the delay tier the
#: copy put off comes back in, or for a local step the lapse sweep's period (a quarter lease), and the
#: start of the worker that takes it.
SLACK_S = 10
#: How long the steps that get killed take.
STEP_S = 4.0


def assert_shipped_lease(fault: Fault) -> None:
    """These tests are about the shipped lease: none may shorten it."""
    assert fault.app.settings.store.step_lease_s == StoreConfig().step_lease_s


def recovery_bound_s(fault: Fault) -> float:
    return fault.app.settings.store.step_lease_s + SLACK_S


def executions(fault: Fault, kind: str, item: str) -> int:
    return fault.ledger.count(kind, "executions").get(item, 0)


def applied(fault: Fault, item: str) -> int:
    """How many attempts of the keyed message ``item`` reached its effect."""
    return fault.ledger.count("slow", "applied").get(item, 0)


def kill_inside(fault: Fault, started: dict[str, list[str]]) -> float:
    """SIGKILL the worker once every item of ``started`` (items by actor kind) has started, and start
    another; when the SIGKILL was sent."""
    fault.wait_until(
        lambda: all(executions(fault, kind, item) >= 1 for kind, items in started.items() for item in items),
        f"{started} started",
    )
    killed = time.monotonic()
    fault.workers.kill()
    fault.workers.start()
    return killed


def started_again(fault: Fault, kind: str, items: list[str]) -> Callable[[], bool]:
    """Whether every one of ``items`` has started a second time."""
    return lambda: all(executions(fault, kind, item) >= 2 for item in items)


def seconds_until(conditions: dict[str, Callable[[], bool]], since: float, timeout_s: float) -> dict[str, float]:
    """Seconds from ``since`` until each condition first held (polled together, so each figure is its
    own); a condition that did not hold within ``timeout_s`` of ``since`` is left out."""
    took: dict[str, float] = {}
    while len(took) < len(conditions) and time.monotonic() < since + timeout_s:
        for case, holds in conditions.items():
            if case not in took and holds():
                took[case] = time.monotonic() - since
        time.sleep(0.1)
    return took


def figures(took: dict[str, float], cases: list[str]) -> str:
    return ", ".join(f"{case} {took[case]:.1f} s" if case in took else f"{case} not yet" for case in cases)


def test_steps_and_a_keyed_message_whose_worker_is_killed_run_again_within_the_lease(shipped: Fault) -> None:
    """A chain's step, a chord's members, a keyed message (and a duplicate of it) and a local step (run
    where the step before it finished: nothing of it in RabbitMQ), all inside their actors when the
    worker dies. Each runs again within the bound, counted from the SIGKILL."""
    assert_shipped_lease(shipped)
    hold, gather, slow = shipped.actors["hold"], shipped.actors["gather"], shipped.actors["slow"]
    members = ["m0", "m1", "m2"]
    chained = shipped.app.start(chain(step(hold, "first", STEP_S), step(hold, "second", 0.1)))
    chorded = shipped.app.start(chord(group([step(hold, m, STEP_S) for m in members]), then=step(gather, "c1")))
    slow.send("k1", STEP_S)
    shipped.workers.env |= {"PIPELINES_LOGGING__LEVEL": "INFO"}  # to see the duplicate skipped
    shipped.workers.start()
    shipped.wait_until(
        lambda: executions(shipped, "slow", "k1") == 1 and all(executions(shipped, "hold", m) for m in members),
        "the delivered work started",
    )
    # A duplicate, as a producer that retries a publish sends: it must wait for the key, then be skipped.
    slow.send("k1", STEP_S)
    # Started once the worker holds the rest: its first step's thread runs its second, nothing waiting.
    local = shipped.app.start(chain(step(hold, "lead", 0.1), step(hold, "tail", STEP_S)))

    killed = kill_inside(shipped, {"hold": ["first", *members, "tail"], "slow": ["k1"]})
    cases: dict[str, tuple[str, list[str]]] = {
        "chain step": ("hold", ["first"]),
        "chord member (last of 3)": ("hold", members),
        "keyed message": ("slow", ["k1"]),
        "local step": ("hold", ["tail"]),
    }
    bound_s = recovery_bound_s(shipped)
    took = seconds_until(
        {case: started_again(shipped, kind, items) for case, (kind, items) in cases.items()}, killed, bound_s
    )
    lease_s = shipped.app.settings.store.step_lease_s
    print(
        f"\nfigures: ran again after the SIGKILL (lease {lease_s:g} s, bound {bound_s:g} s): "
        f"{figures(took, list(cases))}"
    )
    assert {case: took.get(case, bound_s + 1) <= bound_s for case in cases} == dict.fromkeys(cases, True)

    statuses = chained.wait(60), chorded.wait(60), local.wait(60)
    shipped.wait_until(lambda: applied(shipped, "k1") >= 1, "the keyed effect")
    shipped.wait_until(
        lambda: (
            "idempotency key 'slow:slow-k1' is done already" in shipped.log.read_text() or applied(shipped, "k1") > 1
        ),
        "the duplicate skipped",
    )
    assert [status.state for status in statuses] == ["succeeded"] * 3
    assert shipped.ledger.count("hold", "executions") == {
        **{"first": 2, "second": 1, "m0": 2, "m1": 2, "m2": 2},
        **{"lead": 1, "tail": 2},
    }
    assert f"Run {local.id}: the worker of its step(s) 0.1 stopped renewing their lease" in shipped.log.read_text()
    assert shipped.ledger.count("gather", "executions") == {"c1": 1}
    assert sorted(shipped.ledger.values("gather")["c1"].split(",")) == sorted(
        f"{m}@{shipped.ledger.values('hold')[m]}" for m in members
    )
    # Every attempt that reached the keyed effect is counted: the killed one did not, the duplicate was skipped.
    assert {
        "executions": shipped.ledger.count("slow", "executions"),
        "applied": shipped.ledger.count("slow", "applied"),
        "effect keys": shipped.ledger.keyed_effects("slow"),
    } == {"executions": {"k1": 2}, "applied": {"k1": 1}, "effect keys": {"k1": 1}}
    assert shipped.app.dead_letters.list() == []


#: RabbitMQ notices a frozen worker by its missed AMQP heartbeats: short ones, so it does within the lease.
FROZEN_HEARTBEAT_S = 3


@dataclass
class Frozen:
    """What the frozen worker's scenario did: its runs, how long after the SIGSTOP each case was finished
    by the other worker, how long the worker stood frozen."""

    fault: Fault
    run: Run[Any]
    local: Run[Any]
    took: dict[str, float]
    frozen_s: float


FROZEN_CASES = ["chain", "local chain", "keyed message"]


def freeze_a_worker(shipped: Fault, other_log: Path) -> Frozen:
    """SIGSTOP a worker inside a chain step, a local step and a keyed message, past the lease, with
    another worker running; then SIGCONT, and wait for its late ends to come."""
    hold = shipped.actors["hold"]
    env = shipped.workers.env | {"PIPELINES_BROKER__HEARTBEAT_S": str(FROZEN_HEARTBEAT_S)}
    frozen, other = Workers(env, shipped.log), Workers(env, other_log)
    run = shipped.app.start(chain(step(hold, "frozen", STEP_S), step(hold, "after", 0.1)))
    shipped.actors["slow"].send("frozen-key", STEP_S)
    frozen.start()
    lease_s = shipped.app.settings.store.step_lease_s
    try:
        shipped.wait_until(
            lambda: executions(shipped, "hold", "frozen") == 1 and executions(shipped, "slow", "frozen-key") == 1,
            "both started",
        )
        local = shipped.app.start(chain(step(hold, "lead", 0.1), step(hold, "frozen-local", STEP_S)))
        shipped.wait_until(lambda: executions(shipped, "hold", "frozen-local") == 1, "the local step started")
        assert frozen.process is not None
        stopped = time.monotonic()
        os.killpg(frozen.process.pid, signal.SIGSTOP)
        other.start()
        took = seconds_until(
            {
                "chain": lambda: run.status().is_final,
                "local chain": lambda: local.status().is_final,
                "keyed message": lambda: applied(shipped, "frozen-key") >= 1,  # the frozen one cannot, stopped
            },
            stopped,
            lease_s + 60,
        )
        frozen_s = time.monotonic() - stopped
        os.killpg(frozen.process.pid, signal.SIGCONT)
        shipped.wait_until(
            lambda: shipped.log.read_text().count("claimed again after its lease lapsed here") >= 2, "refusals"
        )
        shipped.wait_until(lambda: applied(shipped, "frozen-key") >= 2, "the frozen worker's keyed message ended")
    finally:
        if frozen.process is not None and frozen.process.poll() is None:
            os.killpg(frozen.process.pid, signal.SIGCONT)
        frozen.stop()
        other.stop()
    return Frozen(shipped, run, local, took, frozen_s)


@pytest.fixture(scope="module")
def frozen_worker(
    services: None, delete_namespace: Callable[[str], None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Future[Frozen]]:
    """The frozen worker's scenario (as the ``shipped`` fixture makes it: the shipped leases and time
    limits), started in a thread of its own; what it saw, once it is over."""
    logs = tmp_path_factory.mktemp("frozen")
    namespace = fresh_namespace()
    made = scenario(namespace, logs / "worker.log")
    assert_shipped_lease(made)
    try:
        with in_background(freeze_a_worker, made, logs / "other.log") as outcome:
            yield outcome
    finally:
        made.discard(delete_namespace)


@pytest.fixture(scope="module", autouse=True)
def _frozen_worker_from_the_first_test(request: pytest.FixtureRequest) -> None:
    start_with_the_first_test(request, "frozen_worker")


def test_a_frozen_worker_loses_its_steps_to_another_and_its_late_ends_are_refused(
    frozen_worker: Future[Frozen],
) -> None:
    """SIGSTOP past the lease, then SIGCONT: RabbitMQ gives the delivered step to the other worker once the
    frozen one misses its heartbeats, the lapse sweep publishes the local step (nothing of it is in
    RabbitMQ) once its lease lapsed; the frozen one's ends, when they come, are not recorded.

    A keyed message is not fenced: the frozen worker's attempt, resumed, reaches its effect after the
    other's did (the at-least-once case); the effect keyed by ``current_effect_key()`` happens once."""
    frozen = frozen_worker.result()
    shipped, run, local = frozen.fault, frozen.run, frozen.local
    lease_s = shipped.app.settings.store.step_lease_s
    refused = shipped.log.read_text().count("claimed again after its lease lapsed here")
    print(
        f"\nfigures: worker frozen (SIGSTOP) inside a chain step, a local step and a keyed message "
        f"(lease {lease_s:g} s, AMQP heartbeat {FROZEN_HEARTBEAT_S} s), finished by the other worker after: "
        f"{figures(frozen.took, FROZEN_CASES)}; resumed after {frozen.frozen_s:.1f} s; its late ends refused: "
        f"{refused}; the keyed message's effect reached by {applied(shipped, 'frozen-key')} attempts, under "
        f"{shipped.ledger.keyed_effects('slow').get('frozen-key', 0)} effect key(s)"
    )
    statuses = run.status(), local.status()
    taken_over_by = shipped.ledger.values("hold")
    assert [status.state for status in statuses] == ["succeeded", "succeeded"]
    assert shipped.app.store.step_result(run.id, "0.0") == f'"frozen@{taken_over_by["frozen"]}"'
    assert local.result(timeout_s=1) == f"frozen-local@{taken_over_by['frozen-local']}"
    assert shipped.ledger.count("hold", "executions") == {"frozen": 2, "after": 1, "lead": 1, "frozen-local": 2}
    assert refused == 2
    # Both attempts reached the effect: the one keyed by its effect key happened once.
    assert {
        "executions": shipped.ledger.count("slow", "executions"),
        "applied": shipped.ledger.count("slow", "applied"),
        "effect keys": shipped.ledger.keyed_effects("slow"),
    } == {"executions": {"frozen-key": 2}, "applied": {"frozen-key": 2}, "effect keys": {"frozen-key": 1}}
