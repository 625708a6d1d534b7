"""Start runs, publish events and wait for runs from asyncio code without blocking the event loop.

Why this shape: the broker client (pika) and the store client are blocking, and a thread per call
would cost a thread per waiting coroutine. An app's asyncio calls share two threads, made on first
use: one that makes the app's blocking calls (start, publish, read) on the app's own connections, and
one that watches every awaited run on a single store subscription and wakes the coroutines whose run
ended. A thousand coroutines waiting for runs cost those two threads and one extra connection.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pipelines.store.base import FINAL_RUN_STATES, RunFeed, RunStatus
from pipelines.store.roles import RunFeeds, RunViews

T = TypeVar("T")

#: Longest the watcher blocks on its subscription before taking new waiters (their first read).
TAKE_NEW_WAITERS_S = 0.05
#: Longest a followed run goes unread (guards against a subscription dropped without a word).
LIVENESS_CHECK_S = 30.0


class _WatcherStore(RunFeeds, RunViews, Protocol):
    """What the watcher needs of the store."""


@dataclass
class _Waiter:
    run_id: str
    future: asyncio.Future[RunStatus | None]
    loop: asyncio.AbstractEventLoop

    def settle(self, status: RunStatus | None) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, status)

    def fail(self, error: BaseException) -> None:
        self.loop.call_soon_threadsafe(_fail, self.future, error)


def _settle(future: asyncio.Future[RunStatus | None], status: RunStatus | None) -> None:
    if not future.done():  # a waiter that timed out or was cancelled is not woken
        future.set_result(status)


def _fail(future: asyncio.Future[RunStatus | None], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


@dataclass
class RunWatcher:
    """One thread and one store subscription that wake every coroutine waiting for a run to end."""

    store: _WatcherStore
    _new: queue.SimpleQueue[_Waiter] = field(default_factory=queue.SimpleQueue)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def until_final(self, run_id: str) -> asyncio.Future[RunStatus | None]:
        """A future of the run's final status (None: no such run), resolved on the caller's loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RunStatus | None] = loop.create_future()
        self._new.put(_Waiter(run_id, future, loop))
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._watch, name="pipelines-run-watcher", daemon=True)
                self._thread.start()
        return future

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _watch(self) -> None:
        feed = self.store.run_feed()
        waiting: dict[str, list[_Waiter]] = {}
        last_check = time.monotonic()
        try:
            while not self._closed:
                if not waiting:  # idle: block on the next waiter, not on the store
                    try:
                        self._add(feed, waiting, self._new.get(timeout=LIVENESS_CHECK_S / 60))
                    except queue.Empty:
                        continue
                self._take_new(feed, waiting)
                changed = feed.next_change(TAKE_NEW_WAITERS_S)
                if changed is not None and changed in waiting:
                    self._check(feed, waiting, changed)
                if time.monotonic() - last_check >= LIVENESS_CHECK_S:
                    last_check = time.monotonic()
                    for run_id in list(waiting):
                        self._check(feed, waiting, run_id)
        except Exception as e:  # the store went away: every waiter hears why instead of hanging
            for waiters in waiting.values():
                for waiter in waiters:
                    waiter.fail(e)
            with self._lock:
                self._thread = None  # the next waiter starts a new watcher
        finally:
            feed.close()

    def _take_new(self, feed: RunFeed, waiting: dict[str, list[_Waiter]]) -> None:
        while True:
            try:
                waiter = self._new.get_nowait()
            except queue.Empty:
                return
            self._add(feed, waiting, waiter)

    def _add(self, feed: RunFeed, waiting: dict[str, list[_Waiter]], waiter: _Waiter) -> None:
        followed = waiter.run_id in waiting
        waiting.setdefault(waiter.run_id, []).append(waiter)
        if not followed:
            feed.follow(waiter.run_id)  # before the read below, so no change falls between
        self._check(feed, waiting, waiter.run_id)

    def _check(self, feed: RunFeed, waiting: dict[str, list[_Waiter]], run_id: str) -> None:
        state = self.store.run_state(run_id)
        if state is not None and state not in FINAL_RUN_STATES:
            return
        status = self.store.get_run(run_id) if state is not None else None
        for waiter in waiting.pop(run_id, []):
            waiter.settle(status)
        feed.unfollow(run_id)


class AsyncBridge:
    """An app's asyncio side: its blocking calls on one thread, its run waits on one watcher."""

    def __init__(self, store: _WatcherStore) -> None:
        self._calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pipelines-aio")
        self.watcher = RunWatcher(store)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the bridge's thread, awaited."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._calls, lambda: fn(*args, **kwargs))

    def close(self) -> None:
        self.watcher.close()
        self._calls.shutdown(wait=True)
