"""The asyncio API inside a running event loop: a ticker keeps ticking while runs start, run and are awaited,
and many waiting coroutines share the app's threads instead of taking one each.

Every test runs on the embedded broker and store, and on the real RabbitMQ and Redis.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import dramatiq
import pytest

from pipelines import chain, step
from pipelines.app import App
from pipelines.errors import RunFailed, RunNotFound, RunTimeout
from pipelines.runs import Run
from pipelines.store import RedisRunStore
from pipelines.wire.naming import run_key
from tests.support.fixtures import MakeApp, StartWorker

TIMEOUT_S = 30
RUNS = 40
#: Ticks the loop makes while every run is held: it runs on (a blocked loop makes none).
TICKS = 10


class Ticker:
    """Counts 10 ms ticks of the event loop; a blocked loop stops counting."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1
            for count, waiter in self._waiters:
                if self.ticks >= count and not waiter.done():
                    waiter.set_result(None)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def ticked(self, count: int) -> None:
        """Return once the loop has ticked ``count`` times in all."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((count, waiter))
        await waiter

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def followed(app: App, runs: list[Run[Any]]) -> None:
    """Return once the store has a subscriber on every run's channel: every waiting coroutine reached its
    wait (polling the store on the loop, with a deadline: there is nothing to subscribe to)."""
    assert isinstance(app.store, RedisRunStore)  # the embedded store too: the same scripts on Redis of its own
    client: Any = app.store._redis
    channels = [run_key(app.settings.namespace, run.id) for run in runs]
    deadline = asyncio.get_running_loop().time() + TIMEOUT_S
    while True:
        unfollowed = [channel for channel, count in client.pubsub_numsub(*channels) if count == 0]
        if not unfollowed:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{len(unfollowed)} of {RUNS} runs not awaited while held"
        await asyncio.sleep(0.01)


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

    async def main() -> tuple[list[Any], int, list[bool]]:
        ticker = Ticker()
        ticker.start()
        runs = [await app.start_async(chain(step(held), step(double)), args=(n,)) for n in range(RUNS)]
        waits = [asyncio.ensure_future(run.result_async(timeout_s=TIMEOUT_S)) for run in runs]
        await followed(app, runs)  # every coroutine is now waiting on its run
        threads_while_waiting = threading.active_count()
        await ticker.ticked(ticker.ticks + TICKS)
        ended_while_held = [wait.done() for wait in waits]  # none can end before the release
        release.set()
        values = await asyncio.gather(*waits)
        await ticker.stop()
        return values, threads_while_waiting, ended_while_held

    # The runs are released by the test's deadline at the latest, kept by a thread of its own: a loop
    # blocked by a wait could not keep it.
    deadline = threading.Timer(TIMEOUT_S, release.set)
    deadline.start()
    threads_before = threading.active_count()
    try:
        values, threads_while_waiting, ended_while_held = asyncio.run(main())
    finally:
        deadline.cancel()

    assert values == [(n + 1) * 2 for n in range(RUNS)]
    # 40 waiting coroutines: the watcher, the bridge's caller and asyncio's default executor at most.
    assert threads_while_waiting - threads_before <= 3
    # The loop ticked on while every run was held: a wait that blocked it would have held the ticks back
    # until its run ended.
    assert not any(ended_while_held)


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
