"""Which middleware hooks a chain step's worker CPU goes to: each hook's thread CPU, per worker process.

``make bench``'s tiers say how much CPU a step costs the worker; this says where in the middleware it
goes. Each hook our workers run is wrapped in a timer of the calling thread's CPU (``thread_time_ns``:
what the hook itself spent, not what other threads did meanwhile). Timing costs about a microsecond
per hook, so, like the script census, it is a short run of its own, apart from the measured rounds.
Each worker process writes its sums to ``<BENCH_HOOK_COSTS_DIR>/<pid>.json`` when it stops.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dramatiq

#: The directory a worker writes its hook costs to; unset: hooks are not timed.
DIRECTORY_ENV = "BENCH_HOOK_COSTS_DIR"

_spent_ns: Counter[str] = Counter()
_lock = threading.Lock()


def install(broker: dramatiq.Broker) -> None:
    """Time every hook of ``broker``'s middleware in this process, if ``BENCH_HOOK_COSTS_DIR`` is set."""
    if not os.environ.get(DIRECTORY_ENV):
        return
    for middleware in broker.middleware:
        for name in dir(type(middleware)):
            own = getattr(type(middleware), name)
            if name.startswith(("before_", "after_")) and own is not getattr(dramatiq.Middleware, name, None):
                label = f"{type(middleware).__name__}.{name}"
                setattr(middleware, name, _timed(getattr(middleware, name), label))
    broker.__dict__.pop("_hook_cache", None)  # the broker's per-hook lists now pick up the timed hooks


def _timed(hook: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(hook)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time_ns()
        try:
            return hook(*args, **kwargs)
        finally:
            spent = time.thread_time_ns() - started
            with _lock:
                _spent_ns[label] += spent

    return timed


def dump() -> None:
    """Write this process's sums (nanoseconds by hook), if hooks are timed."""
    directory = os.environ.get(DIRECTORY_ENV)
    if directory:
        with _lock:
            Path(directory, f"{os.getpid()}.json").write_text(json.dumps(dict(_spent_ns)))


def read(directory: Path) -> Counter[str]:
    """The sums every worker process wrote to ``directory``, added up."""
    total: Counter[str] = Counter()
    for path in directory.glob("*.json"):
        total.update(json.loads(path.read_text()))
    return total
