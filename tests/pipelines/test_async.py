"""The asyncio API inside a running event loop: a ticker keeps ticking while runs start, run and are awaited,
and many waiting coroutines share the app's threads instead of taking one each.

Every test runs on the embedded broker and store, and on the real RabbitMQ and Redis.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import dramatiq
import pytest

from pipelines import chain, step
from pipelines.errors import RunFailed, RunNotFound, RunTimeout
from tests.fixtures import MakeApp, StartWorker

TIMEOUT_S = 30
RUNS = 40
#: How long the actors are held back, so every wait really waits (a deadline, not a measurement).
HOLD_S = 1.0


class Ticker:
    """Counts 10 ms ticks of the event loop; a blocked loop stops counting."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def test_runs_started_and_awaited_in_a_loop_leave_it_ticking_and_take_no_thread_each(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    release = threading.Event()

    @dramatiq.actor(broker=app.broker)
    def held(x: int) -> int:
        release.wait(TIMEOUT_S)
        return x + 1

    @dramatiq.actor(broker=app.broker)
    def double(x: int) -> int:
        return x * 2

    start_worker(app)

    async def main() -> tuple[list[Any], int, int, int]:
        ticker = Ticker()
        ticker.start()
        runs = [await app.start_async(chain(step(held), step(double)), args=(n,)) for n in range(RUNS)]
        results = asyncio.gather(*(run.result_async(timeout_s=TIMEOUT_S) for run in runs))
        await asyncio.sleep(0.2)  # every coroutine is now waiting on its run
        threads_while_waiting = threading.active_count()
        ticks_before = ticker.ticks
        await asyncio.get_running_loop().run_in_executor(None, time.sleep, HOLD_S)  # the loop itself is free
        ticks_while_held = ticker.ticks - ticks_before
        release.set()
        values = await results
        await ticker.stop()
        return values, threads_while_waiting, ticks_while_held, ticker.ticks

    threads_before = threading.active_count()
    values, threads_while_waiting, ticks_while_held, _ = asyncio.run(main())

    assert values == [(n + 1) * 2 for n in range(RUNS)]
    # 40 waiting coroutines: the watcher, the bridge's caller and asyncio's default executor at most.
    assert threads_while_waiting - threads_before <= 3
    assert ticks_while_held >= 10  # a blocked loop would not have ticked at all


def test_async_waits_report_failure_timeout_and_unknown_runs_like_the_blocking_ones(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    release = threading.Event()

    @dramatiq.actor(broker=app.broker, max_retries=0)
    def broken(x: int) -> int:
        raise ValueError(f"bad {x}")

    @dramatiq.actor(broker=app.broker)
    def slow(x: int) -> int:
        release.wait(TIMEOUT_S)
        return x

    start_worker(app)

    async def main() -> None:
        failing = await app.start_async(step(broken), args=(7,))
        with pytest.raises(RunFailed, match="bad 7"):
            await failing.result_async(timeout_s=TIMEOUT_S)

        pending = await app.start_async(step(slow), args=(1,))
        with pytest.raises(RunTimeout, match="is still"):
            await pending.wait_async(timeout_s=0.3)
        release.set()
        assert (await pending.wait_async(timeout_s=TIMEOUT_S)).state == "succeeded"

        with pytest.raises(RunNotFound):
            await app.get_run("no-such-run").wait_async(timeout_s=TIMEOUT_S)

        failed = await app.runs_async(state="failed")
        assert [run.run_id for run in failed.runs] == [failing.id]

    asyncio.run(main())


def test_events_are_published_from_async_code(make_app: MakeApp, start_worker: StartWorker) -> None:
    app = make_app()
    seen: list[dict[str, Any]] = []
    arrived = threading.Event()

    @dramatiq.actor(broker=app.broker, subscribe=["order.*"])
    def on_order(event: dict[str, Any]) -> None:
        seen.append(event)
        arrived.set()

    start_worker(app)

    async def main() -> str:
        published: str = await app.publish_async("order.placed", {"id": 3})
        return published

    message_id = asyncio.run(main())

    assert message_id
    assert arrived.wait(TIMEOUT_S)
    assert seen == [{"id": 3}]
