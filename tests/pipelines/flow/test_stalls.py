"""The stall sweep re-drives a stalled run from what the store keeps; a first step that encrypts is kept
sealed and reaches its actor opened. (The sweep on the real services, with lost messages and a long
healthy run beside: tests/fail_closed/test_stalled_runs.py; the store's side: StallChecks' contract.)
"""

from __future__ import annotations

import threading

import dramatiq
from cryptography.fernet import Fernet

from pipelines import chain, step
from pipelines.app import App
from pipelines.middleware import StalledRuns
from pipelines.store import RedisRunStore
from pipelines.wire.naming import running_runs_key, stall_sweep_key
from tests.support.fixtures import MakeApp, StartWorker

PAN = "340000000000009"


def stalled(app: App, run_id: str) -> None:
    """Make the run look untouched for ages, to a sweep that has looked without a gap since."""
    store = app.store
    assert isinstance(store, RedisRunStore)  # the embedded store is the same scripts on fakeredis
    store.sweep_stalled(stalled_after_ms=60_000, redrives=3, gap_ms=600_000, limit=1)  # starts its clock
    store._redis.hset(store._key(run_id), "touched", 1)
    store._redis.zadd(running_runs_key(app.settings.namespace), {run_id: 1})
    store._redis.hset(stall_sweep_key(app.settings.namespace), "resumed", 1)


def test_a_stalled_run_whose_first_step_encrypts_is_re_driven_and_its_kept_arguments_are_sealed(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app(encryption={"keys": [Fernet.generate_key().decode()]})
    got: list[tuple[str, str]] = []
    lock = threading.Lock()

    @dramatiq.actor(broker=app.broker, encrypt=True)
    def store_pan(pan: str, note: str) -> str:
        with lock:
            got.append((pan, note))
        return pan[-4:]

    run = app.start(chain(step(store_pan, PAN)), args=("vip",))
    stalled(app, run.id)
    sweep = next(m for m in app.broker.middleware if isinstance(m, StalledRuns)).sweep
    found = sweep.sweep(app.broker)  # before any worker: the run's first message waits in its queue too
    start_worker(app)

    assert [(check.run_id, check.kind) for check in found] == [(run.id, "redrive")]
    assert run.result(timeout_s=30) == "0009"
    assert got == [(PAN, "vip")]  # the first message or its copy: the other one's claim skipped it
    assert isinstance(app.store, RedisRunStore)
    key = app.store._key(run.id)
    kept = [*app.store._redis.hgetall(key + ":starts").values(), *app.store._redis.hgetall(key + ":inputs").values()]
    assert kept
    assert all(PAN.encode() not in value and b"vip" not in value for value in kept)
