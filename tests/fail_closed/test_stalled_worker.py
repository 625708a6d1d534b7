"""A worker stopped (SIGSTOP: a VM freeze, a long GC pause) for longer than its time limit, then resumed.

A freeze is not time an actor ran: on waking, the worker moves its time limits on by the time it stood
still, so an actor that finishes as the process wakes is not interrupted and its key is not released
for a retry to apply its effect again. Steps whose lease lapsed during the stop may run again; their
effect, keyed by ``current_effect_key()`` as the docs show (``INSERT ... ON CONFLICT (effect_key) DO
NOTHING`` into a table whose primary key is the effect key), happens once: a key that changed between
two runs of a step would show as a row more. Figures are printed (``-s``).

The frozen batch runs in a thread of its own from the module's first test on (``tests/support/overlap.py``),
in a namespace and with a worker of its own: its freeze overlaps the other test's stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import dramatiq
import pytest
import redis

from pipelines import chain, step
from pipelines.app import build_app
from pipelines.config.settings import Settings
from pipelines.wire.naming import idempotency_record_key
from tests.support.backends import POSTGRES_URL
from tests.support.fail_closed.fail_closed_support import Effects
from tests.support.housekeeping import fresh_namespace, start_process, stop_process
from tests.support.overlap import in_background, start_with_the_first_test

ROOT = Path(__file__).resolve().parents[2]
AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TIME_LIMIT_S = 3
LEASE_S = 4
STOP_S = 8  # longer than the time limit and the lease, shorter than two missed AMQP heartbeats
STOPS = 2
CHAINS = 40
STEPS = 3


@pytest.fixture
def keyed_effects() -> Iterator[Effects]:
    """The docs' table of effects, whose primary key is the effect key (``fc_<random>``)."""
    table = Effects(f"fc_{uuid.uuid4().hex[:12]}", keyed=True)
    yield table
    table.drop()


@pytest.fixture
def runs_table(keyed_effects: Effects) -> Iterator[Effects]:
    """Every execution of the step, beside the keyed effects (``<effects>_runs``, no unique constraint)."""
    table = Effects(f"{keyed_effects.table}_runs")
    yield table
    table.drop()


@pytest.mark.timeout(240)
def test_a_worker_stopped_longer_than_its_time_limit_applies_each_keyed_effect_once(
    services: None,
    delete_namespace: Callable[[str], None],
    keyed_effects: Effects,
    runs_table: Effects,
    tmp_path: Path,
) -> None:
    namespace = fresh_namespace()
    env = _worker_env(namespace, keyed_effects.table, PIPELINES_STORE__STEP_LEASE_S=str(LEASE_S))
    settings = Settings.from_values(
        {
            "namespace": namespace,
            "broker": {"url": AMQP_URL},
            "store": {"url": REDIS_URL, "step_lease_s": LEASE_S},
            "worker": {"time_limit_s": TIME_LIMIT_S},
        }
    )
    app = build_app(settings)
    worker: subprocess.Popen[bytes] | None = None
    log = tmp_path / "worker.log"
    try:
        ledger_step = dramatiq.actor(broker=app.broker, actor_name="ledger_step")(_signature)
        runs = [app.start(chain(*[step(ledger_step, f"c{n}")] * STEPS), args=(0,)) for n in range(CHAINS)]
        worker = _start_worker(env, log)
        for stop in range(1, STOPS + 1):
            # Stop whenever another slice of the work is done, so every stop lands mid-run.
            share = stop * CHAINS * STEPS // (STOPS + 2)
            _wait(partial(_done_at_least, runs_table, share), 90, log)
            os.killpg(worker.pid, signal.SIGSTOP)
            time.sleep(STOP_S)  # the stall itself
            os.killpg(worker.pid, signal.SIGCONT)
        for run in runs:
            run.wait(timeout_s=120)
        statuses = [run.status() for run in runs]
        keyed = keyed_effects.counts()
        executions = runs_table.counts()
        print(
            f"\nfigures: {STOPS} SIGSTOPs of {STOP_S} s (time limit {TIME_LIMIT_S} s) over {CHAINS} chains x {STEPS} "
            f"steps: runs succeeded {sum(s.state == 'succeeded' for s in statuses)}/{CHAINS}, stuck "
            f"{sum(not s.is_final for s in statuses)}, keyed effects {len(keyed)}, executions "
            f"{sum(executions.values())} (steps run more than once: {sum(c > 1 for c in executions.values())}, "
            f"their second inserts absorbed by the key), dead letters {len(app.dead_letters.list())}"
        )
        assert all(status.state == "succeeded" and status.result == STEPS for status in statuses)
        # One row per step: an effect key that changed between two runs of a step would add a row.
        assert set(keyed) == {f"{run.id}:0.{index}" for run in runs for index in range(STEPS)}
    finally:
        if worker is not None:  # done with: killed at once, stopped (SIGSTOP) or not
            stop_process(worker, timeout_s=0)
        app.close()
        delete_namespace(namespace)


FROZEN_TIME_LIMIT_S = 8
FROZEN_S = 20  # longer than the time limit: every actor running when it froze is past its deadline on waking
KEYED_MESSAGES = 64


@dataclass
class FrozenBatch:
    """What the frozen batch came to: executions per key (rows of a table with no unique key), and the
    worker's log."""

    counts: dict[str, int]
    log: str


def freeze_mid_batch(delete_namespace: Callable[[str], None], log: Path) -> FrozenBatch:
    """64 keyed messages on a worker of 8 threads whose time limits are 8 s, frozen 20 s mid-batch; what
    the table and the log say once every key is recorded done."""
    executions = Effects(f"fc_{uuid.uuid4().hex[:12]}")
    namespace = fresh_namespace()
    env = _worker_env(
        namespace, executions.table, PIPELINES_WORKER__TIME_LIMIT_S=str(FROZEN_TIME_LIMIT_S), FC_WORK_S="1"
    )
    app = build_app(
        Settings.from_values({"namespace": namespace, "broker": {"url": AMQP_URL}, "store": {"url": REDIS_URL}})
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        charge = dramatiq.actor(
            broker=app.broker, actor_name="charge", idempotency_key=lambda order_id: f"charge-{order_id}"
        )(_charge_signature)
        for order_id in range(KEYED_MESSAGES):
            charge.send(order_id)
        worker = _start_worker(env, log)
        _wait(partial(_done_at_least, executions, 8), 90, log)  # mid-batch: the threads are all inside actors
        os.killpg(worker.pid, signal.SIGSTOP)
        time.sleep(FROZEN_S)  # the freeze itself
        os.killpg(worker.pid, signal.SIGCONT)
        # Every key recorded done: from then on a copy of any message is skipped, so the count is final.
        _wait(partial(_keys_done, namespace), 120, log)
        return FrozenBatch(executions.counts(), log.read_text(errors="replace"))
    finally:
        if worker is not None:  # done with: killed at once, stopped (SIGSTOP) or not
            stop_process(worker, timeout_s=0)
        app.close()
        executions.drop()
        delete_namespace(namespace)


@pytest.fixture(scope="module")
def frozen_batch(
    services: None, delete_namespace: Callable[[str], None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Future[FrozenBatch]]:
    """The frozen batch, started in a thread of its own (``tests/support/overlap.py``): its freeze
    overlaps the other test's stops."""
    log = tmp_path_factory.mktemp("frozen_batch") / "worker.log"
    with in_background(freeze_mid_batch, delete_namespace, log) as outcome:
        yield outcome


@pytest.fixture(scope="module", autouse=True)
def _frozen_batch_from_the_first_test(request: pytest.FixtureRequest) -> None:
    start_with_the_first_test(request, "frozen_batch")


@pytest.mark.timeout(240)
def test_a_worker_frozen_past_its_time_limit_runs_no_keyed_message_twice(frozen_batch: Future[FrozenBatch]) -> None:
    """Frozen mid-batch for 20 s with 8 s time limits, a worker wakes with every actor it was running past
    its deadline. Those that finish as it wakes have applied their effect: interrupting them would fail
    the attempt, release the key and run the body again. A freeze is not time an actor ran."""
    batch = frozen_batch.result()
    counts = batch.counts
    print(
        f"\nfigures: {KEYED_MESSAGES} keyed messages, 8 threads, frozen {FROZEN_S} s with {FROZEN_TIME_LIMIT_S} s "
        f"time limits: executions {sum(counts.values())}, applied twice {sum(c > 1 for c in counts.values())}, "
        f"time limits fired {batch.log.count('Time limit exceeded')}"
    )
    assert set(counts) == {f"charge-{order_id}" for order_id in range(KEYED_MESSAGES)}
    assert [key for key, count in counts.items() if count > 1] == []
    assert "stood still" in batch.log


def _worker_env(namespace: str, table: str, **overrides: str) -> dict[str, str]:
    return (
        {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")}
        | {
            "PIPELINES_NAMESPACE": namespace,
            "PIPELINES_BROKER__URL": AMQP_URL,
            "PIPELINES_STORE__URL": REDIS_URL,
            "PIPELINES_WORKER__TIME_LIMIT_S": str(TIME_LIMIT_S),
            "PIPELINES_LOGGING__LEVEL": "WARNING",
            "FC_EFFECTS_TABLE": table,
            "FC_POSTGRES_URL": POSTGRES_URL,
        }
        | overrides
    )


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return start_process(
            [
                *(str(Path(sys.executable).parent / "dramatiq"), "tests.support.fail_closed.stall_worker"),
                *("--path", str(ROOT), "--processes", "1", "--threads", "8"),
            ],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )


def _keys_done(namespace: str) -> bool:
    with redis.Redis.from_url(REDIS_URL) as client:
        states = client.mget([idempotency_record_key(namespace, f"charge:charge-{n}") for n in range(KEYED_MESSAGES)])
    return all(state == b"done" for state in states)


def _charge_signature(order_id: int) -> None:
    """The producer's stand-in for the worker's ``charge``."""
    raise NotImplementedError


def _done_at_least(table: Effects, count: int) -> bool:
    return sum(table.counts().values()) >= count


def _signature(tag: str, value: int) -> int:
    """The producer's stand-in for the worker's ``ledger_step`` (only its name and parameters matter)."""
    raise NotImplementedError


def _wait(done: Callable[[], bool], timeout_s: float, log: Path) -> None:
    """Wait for progress made in another process (polling PostgreSQL: nothing to subscribe to)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"no progress; worker log tail:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
