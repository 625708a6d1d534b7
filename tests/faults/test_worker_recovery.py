"""A worker that dies or freezes inside a step, with the shipped leases and time limits: the step runs
again within the lease bound, nothing is lost, and an attempt that lost its step cannot end it.

Figures (how long after the kill each step ran again) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from pipelines import chain, chord, group, step
from pipelines.config.sections import StoreConfig
from tests.support.faults.fault_scenario import Fault, Workers

#: What a killed worker's step waits for at most: the rest of its lease (``store.step_lease_s``, renewed
#: each quarter of it while the worker lived), the delay tier the copy put off comes back in, and the
#: start of the worker that takes it.
SLACK_S = 10
#: How long the steps that get killed take.
STEP_S = 4.0


@pytest.fixture(autouse=True)
def _shipped_lease(shipped: Fault) -> None:
    """These tests are about the shipped lease: none may shorten it."""
    assert shipped.app.settings.store.step_lease_s == StoreConfig().step_lease_s


def recovery_bound_s(fault: Fault) -> float:
    return fault.app.settings.store.step_lease_s + SLACK_S


def executions(fault: Fault, kind: str, item: str) -> int:
    return fault.ledger.count(kind, "executions").get(item, 0)


def kill_inside(fault: Fault, kind: str, items: list[str]) -> float:
    """SIGKILL the worker once every one of ``items`` has started, and start another; when it died."""
    fault.wait_until(lambda: all(executions(fault, kind, item) == 1 for item in items), f"{items} started")
    fault.workers.kill()
    killed = time.monotonic()
    fault.workers.start()
    return killed


def ran_again_after(fault: Fault, kind: str, items: list[str], killed: float) -> float:
    """Seconds from the kill until every one of ``items`` had started again (within the bound)."""
    fault.wait_until(
        lambda: all(executions(fault, kind, item) == 2 for item in items),
        f"{items} run again",
        timeout_s=recovery_bound_s(fault),
    )
    return time.monotonic() - killed


def test_steps_and_a_keyed_message_whose_worker_is_killed_run_again_within_the_lease(shipped: Fault) -> None:
    """A chain's step, a chord's members, a keyed message and a local step (run where the step before it
    finished: nothing of it in RabbitMQ), all inside their actors when the worker dies."""
    hold, gather = shipped.actors["hold"], shipped.actors["gather"]
    members = ["m0", "m1", "m2"]
    chained = shipped.app.start(chain(step(hold, "first", STEP_S), step(hold, "second", 0.1)))
    chorded = shipped.app.start(chord(group([step(hold, m, STEP_S) for m in members]), then=step(gather, "c1")))
    shipped.actors["slow"].send("k1", STEP_S)
    shipped.workers.start()
    shipped.wait_until(
        lambda: executions(shipped, "slow", "k1") == 1 and all(executions(shipped, "hold", m) for m in members),
        "the delivered work started",
    )
    # Started once the worker holds the rest: its first step's thread runs its second, nothing waiting.
    local = shipped.app.start(chain(step(hold, "lead", 0.1), step(hold, "tail", STEP_S)))

    killed = kill_inside(shipped, "hold", ["first", *members, "tail"])
    steps_s = ran_again_after(shipped, "hold", ["first", *members], killed)
    local_s = ran_again_after(shipped, "hold", ["tail"], killed)
    keyed_s = ran_again_after(shipped, "slow", ["k1"], killed)
    statuses = chained.wait(60), chorded.wait(60), local.wait(60)
    shipped.wait_until(lambda: "k1" in shipped.ledger.count("slow", "effects"), "the keyed effect")

    lease_s = shipped.app.settings.store.step_lease_s
    print(
        f"\nworker killed inside a chain step, three chord members, a keyed message and a local step (lease "
        f"{lease_s:g} s): the delivered steps ran again after {steps_s:.1f} s, the keyed message after "
        f"{keyed_s:.1f} s, the local step (published again by the lapse sweep) after {local_s:.1f} s"
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
    assert shipped.ledger.count("slow", "effects") == {"k1": 1}
    assert shipped.app.dead_letters.list() == []


def test_a_frozen_worker_loses_its_steps_to_another_and_its_late_ends_are_refused(
    shipped: Fault, tmp_path: Path
) -> None:
    """SIGSTOP past the lease, then SIGCONT: RabbitMQ gives the delivered step to the other worker once the
    frozen one misses its heartbeats, the lapse sweep publishes the local step (nothing of it is in
    RabbitMQ) once its lease lapsed; the frozen one's ends, when they come, are not recorded."""
    hold = shipped.actors["hold"]
    # RabbitMQ notices a frozen worker by its missed AMQP heartbeats: short ones, so it does within the lease.
    env = shipped.workers.env | {"PIPELINES_BROKER__HEARTBEAT_S": "3"}
    frozen, other = Workers(env, shipped.log), Workers(env, tmp_path / "other.log")
    run = shipped.app.start(chain(step(hold, "frozen", STEP_S), step(hold, "after", 0.1)))
    shipped.actors["slow"].send("frozen-key", STEP_S)
    frozen.start()
    try:
        shipped.wait_until(
            lambda: executions(shipped, "hold", "frozen") == 1 and executions(shipped, "slow", "frozen-key") == 1,
            "both started",
        )
        local = shipped.app.start(chain(step(hold, "lead", 0.1), step(hold, "frozen-local", STEP_S)))
        shipped.wait_until(lambda: executions(shipped, "hold", "frozen-local") == 1, "the local step started")
        assert frozen.process is not None
        os.killpg(frozen.process.pid, signal.SIGSTOP)
        other.start()
        lease_s = shipped.app.settings.store.step_lease_s
        statuses = run.wait(lease_s + 60), local.wait(lease_s + 60)
        shipped.wait_until(lambda: executions(shipped, "slow", "frozen-key") == 2, "the keyed message taken over")
        os.killpg(frozen.process.pid, signal.SIGCONT)
        shipped.wait_until(
            lambda: shipped.log.read_text().count("claimed again after its lease lapsed here") >= 2, "refusals"
        )
    finally:
        if frozen.process is not None and frozen.process.poll() is None:
            os.killpg(frozen.process.pid, signal.SIGCONT)
        frozen.stop()
        other.stop()

    taken_over_by = shipped.ledger.values("hold")
    assert [status.state for status in statuses] == ["succeeded", "succeeded"]
    assert shipped.app.store.step_result(run.id, "0.0") == f'"frozen@{taken_over_by["frozen"]}"'
    assert local.result(timeout_s=1) == f"frozen-local@{taken_over_by['frozen-local']}"
    assert shipped.ledger.count("hold", "executions") == {"frozen": 2, "after": 1, "lead": 1, "frozen-local": 2}
    assert shipped.ledger.count("slow", "effects") == {"frozen-key": 1}
