"""Profiles under faults: ordered partitions and long jobs (run again, or failed, by their ``on_lost``)
through worker kills, two schedulers.

Figures are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipelines import step
from tests.support.faults.fault_scenario import Fault
from tests.support.housekeeping import start_process, stop_process

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 5000
KEYS = 50
KILLS = 3
#: Partitions of the ordered actor (fault_actors.timeline): at most one message each in flight.
PARTITIONS = 8


def collapse(sequence: list[int]) -> list[int]:
    """The sequence without immediate repeats (a redelivery of the message a kill interrupted)."""
    return [value for i, value in enumerate(sequence) if i == 0 or value != sequence[i - 1]]


def test_ordered_events_keep_their_order_per_key_through_worker_kills(fault: Fault) -> None:
    timeline = fault.actors["timeline"]
    per_key = EVENTS // KEYS
    messages = [timeline.message(f"user{k}", seq) for seq in range(per_key) for k in range(KEYS)]
    for start in range(0, len(messages), 500):
        fault.app.broker.enqueue_many(messages[start : start + 500])
    fault.workers.start()

    def applied() -> int:
        return sum(len(set(fault.ledger.sequence("timeline", f"user{k}"))) for k in range(KEYS))

    for kill in range(1, KILLS + 1):
        share = kill * EVENTS // (KILLS + 2)
        fault.wait_count(applied, share, "progress")
        fault.workers.kill()
        fault.workers.start()
    fault.wait_until(lambda: applied() == EVENTS, "every event applied")

    sequences = {k: fault.ledger.sequence("timeline", f"user{k}") for k in range(KEYS)}
    repeats = sum(len(seq) - len(collapse(seq)) for seq in sequences.values())
    out_of_order = [k for k, seq in sequences.items() if collapse(seq) != list(range(per_key))]
    print(
        f"\nordered: {EVENTS} events over {KEYS} keys, {PARTITIONS} partitions; kills: {fault.workers.kills}; "
        f"lost: {EVENTS - applied()}; keys out of order: {len(out_of_order)}; "
        f"events applied twice in a row (interrupted by a kill): {repeats}"
    )
    assert out_of_order == []
    assert repeats <= KILLS * PARTITIONS
    assert fault.app.dead_letters.list() == []


def test_a_long_job_whose_worker_is_killed_runs_again_once_its_lease_lapses(fault: Fault) -> None:
    transcode = fault.actors["transcode"]
    run = fault.app.start(step(transcode, "movie", 3.0))
    fault.workers.start()

    def progressed() -> bool:
        progress = run.status().steps[0].progress
        return progress is not None and progress > 0.2

    fault.wait_until(progressed, "the job's first progress reports")
    fault.workers.kill()
    fault.workers.start()
    status = run.wait(timeout_s=90)

    executions = fault.ledger.count("transcode", "executions")
    print(
        f"\nlong job of 3 s, lease 2 s, killed at {status.steps[0].progress or 0:.0%}: "
        f"run {status.state} after {status.steps[0].attempts} attempts, {executions.get('movie')} executions"
    )
    assert status.state == "succeeded"
    assert status.result == "movie"
    assert executions == {"movie": 2}
    assert status.steps[0].attempts == 2
    assert fault.app.dead_letters.list() == []


def test_a_long_job_with_on_lost_fail_whose_worker_is_killed_is_dead_lettered_and_fails_its_run(fault: Fault) -> None:
    backup = fault.actors["backup"]
    run = fault.app.start(step(backup, "vol-1", 60.0))
    fault.workers.start()

    fault.wait_until(lambda: run.status().steps[0].progress, "the job's first progress report")
    fault.workers.kill()
    fault.workers.start()  # the job's watchdog runs on a worker
    status = run.wait(timeout_s=60)

    [letter] = fault.app.dead_letters.list()
    print(f"\nlong job with on_lost=fail, lease 2 s, killed: run {status.state}, dead letter {letter.reason.reason!r}")
    reason = letter.reason
    assert (reason.reason, reason.error_type, reason.run_id) == ("worker lost", "WorkerLost", run.id)
    assert (status.state, status.failed_step) == ("failed", "0.0")
    assert "stopped renewing its lease" in (status.error or "")
    assert fault.ledger.count("backup", "executions") == {"vol-1": 1}  # not run again
    assert fault.ledger.count("backup", "effects") == {}


def test_two_schedulers_fire_each_tick_once(fault: Fault) -> None:
    fault.workers.start(module="sched_worker")
    command = [str(Path(sys.executable).parent / "periodiq"), "tests.support.faults.sched_worker", "--path", str(ROOT)]
    schedulers: list[subprocess.Popen[bytes]] = []
    try:
        with fault.log.open("ab") as log:
            for _ in range(2):  # each stopped below even if the next one fails to start
                schedulers.append(start_process(command, env=fault.workers.env, stdout=log, stderr=log))
        fault.wait_until(lambda: fault.ledger.sequence("ticks", "minutely"), "the first tick", timeout_s=150)
        [tick] = fault.ledger.sequence("ticks", "minutely")[:1]
        fault.wait_until(lambda: fault.app.store.tick_claims("minutely", tick) >= 2, "the second scheduler's copy")
    finally:
        for scheduler in schedulers:
            stop_process(scheduler, timeout_s=30)

    ran = [t for t in fault.ledger.sequence("ticks", "minutely") if t == tick]
    print(f"\ntwo schedulers: tick {tick} sent {fault.app.store.tick_claims('minutely', tick)} times, ran {len(ran)}")
    assert ran == [tick]
    assert fault.app.store.tick_claims("minutely", tick) == 2
