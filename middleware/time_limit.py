"""Dramatiq's time limit, raised only while the actor's own function runs.

Why: Dramatiq's ``TimeLimit`` raises ``TimeLimitExceeded`` in a worker thread outside its lock, after
marking the deadline as handled. When the worker was frozen past the limit (a paused VM, a long GC
pause, SIGSTOP), the exception can land after the actor returned: in the worker's failure handling,
where nothing catches it, so the worker thread dies holding its message and the run waits forever.
Here the limit is armed and disarmed around the actor's function itself, and raising and disarming
exclude each other (disarming also cancels an exception raised but not yet delivered), so the
exception either interrupts the actor or never arrives. A process that stood still (its deadline
thread woke late by more than ``FROZEN_AFTER_S``) moves its deadlines on by the time it lost: a freeze
is not time an actor ran, and an attempt that finished as the process woke must not count as failed.
Under gevent, Dramatiq's own timers are used.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy
from dramatiq.middleware import TimeLimit
from dramatiq.middleware.time_limit import TimeLimitExceeded
from dramatiq.threading import is_gevent_active, raise_thread_exception

from pipelines.handling.outcome import outcome_of
from pipelines.wire import option_values as wire_options

_GUARDED = "_pipelines_time_limited"
# A tick of the deadline thread later than its interval by this much means the process was frozen.
FROZEN_AFTER_S = 1.0


class _ActorDeadlines(threading.Thread):
    """The deadline of each worker thread that is inside an actor, fired under the same lock that
    disarms it."""

    def __init__(self, interval_s: float, logger: Any) -> None:
        super().__init__(name="pipelines-time-limit", daemon=True)
        self._interval_s = interval_s
        self._logger = logger
        self._lock = threading.Lock()
        self._deadlines: dict[int, float] = {}
        self._fired: set[int] = set()

    def run(self) -> None:
        last = time.monotonic()
        while True:
            time.sleep(self._interval_s)
            now = time.monotonic()
            self.fire(now, frozen_s=now - last - self._interval_s)
            last = now

    def fire(self, now: float, *, frozen_s: float = 0.0) -> None:
        with self._lock:
            if frozen_s > FROZEN_AFTER_S:
                self._forgive_freeze(frozen_s)
            for thread_id, deadline in list(self._deadlines.items()):
                if now >= deadline:
                    del self._deadlines[thread_id]
                    self._fired.add(thread_id)
                    self._logger.warning("Time limit exceeded. Raising exception in worker thread %r.", thread_id)
                    raise_thread_exception(thread_id, TimeLimitExceeded)  # type: ignore[no-untyped-call]

    def _forgive_freeze(self, frozen_s: float) -> None:
        """Move every deadline on by the time the whole process stood still.

        Why: ``time.monotonic()`` runs on while the process is stopped (SIGSTOP, a paused VM, a long GC
        pause), but no actor ran then. Firing at once would interrupt threads that finished their work
        in the instant after the process woke, and their retries would do it again.
        """
        if self._deadlines:
            self._logger.warning(
                "This process stood still for %.1f s: the time limits of its %d running actors move on as much.",
                frozen_s,
                len(self._deadlines),
            )
        for thread_id in self._deadlines:
            self._deadlines[thread_id] += frozen_s

    def arm(self, thread_id: int, limit_s: float) -> None:
        with self._lock:
            self._deadlines[thread_id] = time.monotonic() + limit_s

    def disarm(self, thread_id: int) -> None:
        with self._lock:
            self._deadlines.pop(thread_id, None)
            if thread_id in self._fired:
                self._fired.discard(thread_id)
                # NULL cancels an asynchronous exception this thread has not met yet.
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)


class ActorTimeLimit(TimeLimit):
    """Dramatiq's ``TimeLimit`` (same ``time_limit`` options), enforced only inside the actor."""

    def __init__(self, *, time_limit: float = 600_000, interval: int = 1000) -> None:
        super().__init__(time_limit=time_limit, interval=interval)
        gevent = is_gevent_active()  # type: ignore[no-untyped-call]
        self._deadlines = None if gevent else _ActorDeadlines(interval / 1000, self.logger)
        self._limit_ms = threading.local()

    def after_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        if self._deadlines is not None and not getattr(actor.fn, _GUARDED, False):
            actor.fn = self._limited(actor.fn)

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        if self._deadlines is None:
            super().after_process_boot(broker)  # type: ignore[no-untyped-call]
            return
        for name in broker.get_declared_actors():
            self.after_declare_actor(broker, broker.get_actor(name))
        if self._deadlines.ident is None:  # booted once per process, however many workers it starts
            self._deadlines.start()

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        limit_ms = self.limit_ms(broker, message)
        if self._deadlines is None:
            self.manager.add_timeout(threading.get_ident(), limit_ms)  # type: ignore[no-untyped-call]
            return
        self._limit_ms.value = limit_ms

    def limit_ms(self, broker: dramatiq.Broker, message: MessageProxy) -> float:
        """The delivery's time limit: the one ``Timeout`` chose for it, else Dramatiq's (the message's
        ``time_limit``, the actor's, this middleware's)."""
        chosen = outcome_of(message).scratch.time_limit_ms
        if chosen is not None:
            return chosen
        actor = broker.get_actor(message.actor_name)
        return wire_options.time_limit_ms(message.options) or actor.options.get("time_limit", self.time_limit)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        if self._deadlines is None:
            super().after_process_message(  # type: ignore[no-untyped-call]
                broker, message, result=result, exception=exception
            )
            return
        self._limit_ms.value = None

    after_skip_message = after_process_message

    def _limited(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        deadlines = self._deadlines
        assert deadlines is not None
        limit_ms = self._limit_ms

        @functools.wraps(fn)
        def limited(*args: Any, **kwargs: Any) -> Any:
            # Taken once: an actor called directly from inside another runs under the outer limit.
            limit = getattr(limit_ms, "value", None)
            limit_ms.value = None
            if limit is None or not deadlines.is_alive():
                return fn(*args, **kwargs)
            thread_id = threading.get_ident()
            deadlines.arm(thread_id, limit / 1000)
            try:
                return fn(*args, **kwargs)
            finally:
                deadlines.disarm(thread_id)

        setattr(limited, _GUARDED, True)
        return limited
