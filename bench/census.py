"""Which run-store scripts a chain step runs and the Redis commands each runs inside; which middleware
hooks its worker CPU goes to (:func:`chain_hooks`).

``INFO commandstats`` counts every ``EVALSHA`` as one command and the scripts' inner commands with
everybody else's; it cannot tell which script ran what. Redis's ``MONITOR`` shows each script call
followed by the commands it ran (a script runs atomically, so nothing comes between). ``MONITOR``
slows Redis down, so the census is a short run of its own, apart from the measured rounds.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import redis

from bench import hook_costs
from bench.cases import Running, key
from bench.common import NAMESPACE, REDIS_URL, wait_for_count
from bench.systems import Ours
from pipelines import chain, step

#: How long no script may run before a census counts the run as ended, in seconds.
QUIET_S = 0.5


def script_names() -> dict[str, str]:
    """Each store script's SHA1 (what ``EVALSHA`` names) → its name."""
    lua = resources.files("pipelines.store").joinpath("lua")
    return {
        hashlib.sha1(entry.read_text().encode()).hexdigest(): Path(entry.name).stem
        for entry in lua.iterdir()
        if entry.name.endswith(".lua")
    }


class Census:
    """Counts script calls by script, and the commands inside them by script and command, while open.

    ``MONITOR`` ends once Redis has been silent for ``silence_s`` (a read that times out loses the
    connection): more than the longest pause between the commands counted. Closing waits that long at most.
    """

    def __init__(self, silence_s: float = 0.5) -> None:
        self.names = script_names()
        self.calls: Counter[str] = Counter()
        self.inner: Counter[tuple[str, str]] = Counter()
        self._client: Any = redis.Redis.from_url(REDIS_URL, socket_timeout=silence_s)
        self._silence_s = silence_s
        self._db = self._client.connection_pool.connection_kwargs.get("db", 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def __enter__(self) -> Census:
        self._monitor = self._client.monitor().__enter__()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._silence_s + 10)
        self._client.close()

    def settle(self, quiet_s: float = QUIET_S) -> None:
        """Wait until no script has run for ``quiet_s`` (the last steps complete after their actor ran)."""
        seen = -1
        while seen != sum(self.calls.values()):
            seen = sum(self.calls.values())
            time.sleep(quiet_s)

    def _listen(self) -> None:
        current: str | None = None
        while not self._stop.is_set():
            try:
                entry = self._monitor.next_command()
            except redis.TimeoutError:
                continue
            except redis.ConnectionError:
                return
            if entry is None or entry["db"] != self._db:
                continue
            words = entry["command"].split()
            if not words:
                continue
            command = words[0].lower()
            if entry["client_type"] == "lua":
                if current is not None:
                    self.inner[(current, command)] += 1
                continue
            current = None
            # EVALSHA sha numkeys key ...: only this benchmark's keys count (the server may be shared).
            if command in ("evalsha", "eval") and len(words) > 3 and words[3].startswith(f"{NAMESPACE}:"):
                name = self.names.get(words[1], "other") if command == "evalsha" else "eval"
                self.calls[name] += 1
                current = name


#: Hooks a worker process runs once (or once per actor), not per message: left out of the step's costs.
ONCE_PER_PROCESS = ("_boot", "_shutdown", "_declare_actor")


def run_chains(system: Ours, n: int) -> None:
    """Start ``n`` three-step chains and wait until their last steps ran."""
    counter = key()
    m = system.actors
    system.app.start_many([chain(step(m.hop, counter), step(m.hop, counter), step(m.last, counter))] * n)
    wait_for_count(counter, n)


def chain_scripts(system: Ours, log: Path, n: int) -> dict[str, float]:
    """Per chain step of ``n`` three-step chains: calls of each script (``<script>_calls``) and the
    commands each runs inside (``<script>_<command>``)."""
    with Running(system, log), Census() as census:
        run_chains(system, n)
        census.settle()
    steps = 3 * n
    figures = {f"{name}_calls": count / steps for name, count in sorted(census.calls.items())}
    figures |= {f"{name}_{command}": count / steps for (name, command), count in sorted(census.inner.items())}
    return figures


def chain_hooks(system: Ours, log: Path, n: int) -> dict[str, float]:
    """Per chain step of ``n`` three-step chains: the worker's CPU in each middleware hook, in microseconds
    (``hook_costs``), and in all of them (``hooks_total``)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    system.env[hook_costs.DIRECTORY_ENV] = str(directory)
    try:
        with Running(system, log):
            run_chains(system, n)
    finally:
        del system.env[hook_costs.DIRECTORY_ENV]
    steps = 3 * n
    spent = hook_costs.read(directory)
    per_message = {label: ns for label, ns in spent.items() if not label.endswith(ONCE_PER_PROCESS)}
    figures = {label: ns / 1000 / steps for label, ns in per_message.items()}
    figures["hooks_total"] = sum(per_message.values()) / 1000 / steps
    return figures
