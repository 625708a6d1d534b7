"""The load of the broker failover tests: a producer thread that keeps publishing keyed messages,
three-step chains and chords through the app's multi-node broker while the test breaks the cluster,
a worker process (the stock ``dramatiq`` CLI on ``failover_worker``), and what became of it all."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import dramatiq
import psycopg

from pipelines import chain, chord, for_each, step
from pipelines.app import App
from pipelines.errors import PipelinesError, RunNotFound
from pipelines.runs import Run
from tests.support.housekeeping import start_process, stop_process

ROOT = Path(__file__).resolve().parents[3]
#: Longest a producer keeps trying one publish before the test fails.
PUBLISH_DEADLINE_S = 90.0
STEPS = 3


@dataclass(frozen=True)
class Load:
    keyed: int
    chains: int
    chords: int
    width: int

    @property
    def executions(self) -> int:
        """Executions of a run without a fault: one per message, step, member and callback."""
        return self.keyed + self.chains * STEPS + self.chords * (self.width + 1)


def declare_stubs(app: App) -> dict[str, dramatiq.Actor[Any, Any]]:
    """The producer's stand-ins for the worker's actors (only their names and parameters matter)."""

    def keyed_effect(n: int) -> None:
        raise NotImplementedError

    def chain_step(tag: str, value: int) -> int:
        raise NotImplementedError

    def chord_member(n: int) -> int:
        raise NotImplementedError

    def chord_total(tag: str, values: list[int]) -> int:
        raise NotImplementedError

    return {
        fn.__name__: dramatiq.actor(broker=app.broker)(fn)
        for fn in (keyed_effect, chain_step, chord_member, chord_total)
    }


@dataclass
class Producer:
    """Publishes ``load`` over about ``span_s`` seconds, interleaved, retrying a publish that raised (a
    keyed message with its key, so a retry is the same message; a run as a new run, since a start that
    raised marked its run failed)."""

    app: App
    load: Load
    span_s: float
    runs: list[Run[Any]] = field(default_factory=list)
    started_at: dict[str, float] = field(default_factory=dict)
    """When each run's start returned (epoch seconds), by run id."""
    executions_of: dict[str, int] = field(default_factory=dict)
    """How many executions each run has without a fault (one per step, member and callback), by run id."""
    errors: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    failure: BaseException | None = None
    finished_at: float = float("inf")
    """When the last publish returned (epoch seconds)."""

    def __post_init__(self) -> None:
        self.actors = declare_stubs(self.app)
        self._thread = threading.Thread(target=self._run, name="failover-producer", daemon=True)

    def _run(self) -> None:
        try:
            items = self._interleave()
            started = time.monotonic()
            pace = self.span_s / max(1, len(items))
            for i, item in enumerate(items):
                delay = started + i * pace - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self._publish(item)
        except BaseException as e:  # reported by wait()
            self.failure = e
        finally:
            self.finished_at = time.time()
            self.done.set()

    def _interleave(self) -> list[Callable[[], None]]:
        a = self.actors
        kinds: list[list[Callable[[], None]]] = [
            [partial_send(a["keyed_effect"], n) for n in range(self.load.keyed)],
            [
                self._starter(chain(*[step(a["chain_step"], f"c{n}")] * STEPS), (0,), f"c{n}", STEPS)
                for n in range(self.load.chains)
            ],
            [
                self._starter(
                    chord(for_each(a["chord_member"], range(self.load.width)), then=step(a["chord_total"], f"d{n}")),
                    (),
                    f"d{n}",
                    self.load.width + 1,
                )
                for n in range(self.load.chords)
            ],
        ]
        total = sum(len(kind) for kind in kinds)
        # Each kind spread evenly over the span: item k of a kind of size m goes at position k/m.
        placed = [(k / len(kind), j, item) for j, kind in enumerate(kinds) for k, item in enumerate(kind)]
        assert len(placed) == total
        return [item for _, _, item in sorted(placed, key=lambda p: (p[0], p[1]))]

    def _starter(self, pipeline: Any, args: tuple[Any, ...], key: str, executions: int) -> Callable[[], None]:
        attempts = iter(range(1_000))

        def start() -> None:
            # A start that raised marked its run failed: a retry is a new run (a new key).
            run = self.app.start(pipeline, args=args, idempotency_key=f"{key}-{next(attempts)}")
            self.started_at[run.id] = time.time()
            self.executions_of[run.id] = executions
            self.runs.append(run)

        return start

    def _publish(self, item: Callable[[], None]) -> None:
        deadline = time.monotonic() + PUBLISH_DEADLINE_S
        while True:
            try:
                item()
            except PipelinesError as e:  # not published: said so, so it is tried again
                self.errors.append(f"{type(e).__name__}: {e}")
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
            else:
                return

    def start(self) -> None:
        self._thread.start()

    def wait(self, timeout_s: float) -> None:
        if not self.done.wait(timeout_s):
            raise AssertionError(f"the producer did not finish in {timeout_s} s")
        if self.failure is not None:
            raise self.failure


def partial_send(actor: dramatiq.Actor[Any, Any], n: int) -> Callable[[], None]:
    def send() -> None:
        actor.send_with_options(args=(n,), idempotency_key=f"k{n}")

    return send


def start_worker(env: dict[str, str], log: Path, *, threads: int = 8) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return start_process(
            [
                *(
                    str(Path(sys.executable).parent / "dramatiq"),
                    "tests.support.cluster.failover_worker",
                    "--path",
                    str(ROOT),
                ),
                *("--processes", "1", "--threads", str(threads)),
            ],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )


def discard_worker(worker: subprocess.Popen[bytes]) -> None:
    """Kill the worker with its process group at once: done with (its test is over, or its consumer is on
    the wrong node), nothing waits for its graceful stop, which spends about 3 s in Dramatiq's polling."""
    stop_process(worker, timeout_s=0)


def execution_times(postgres_url: str, table: str) -> list[datetime]:
    """When each execution was recorded, in order."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        rows = connection.execute(f"SELECT at FROM {table}_runs ORDER BY at").fetchall()
    return [row[0] for row in rows]


def longest_pause(times: list[datetime], after: float, before: float) -> float:
    """The longest time between two executions (or the window's edges) in [after, before] (epoch s)."""
    inside = [after, *(t.timestamp() for t in times if after < t.timestamp() < before), before]
    return max(b - a for a, b in itertools.pairwise(inside))


#: The state :func:`wait_for_runs` counts a run by when the run store no longer has it.
NOT_IN_STORE = "not in the store"


def wait_for_runs(runs: list[Run[Any]], timeout_s: float) -> Counter[str]:
    """Each run's final state (or its state when the deadline passed), counted; a run the store lost
    counts as :data:`NOT_IN_STORE` (see :func:`runs_not_in_store`)."""
    deadline = time.monotonic() + timeout_s
    states: Counter[str] = Counter()
    for run in runs:
        with contextlib.suppress(PipelinesError):
            run.wait(timeout_s=max(0.1, deadline - time.monotonic()))
        try:
            states[run.status().state] += 1
        except RunNotFound:
            states[NOT_IN_STORE] += 1
    return states


def runs_not_in_store(runs: list[Run[Any]]) -> set[str]:
    """The ids of the runs the run store does not have."""
    lost = set()
    for run in runs:
        try:
            run.status()
        except RunNotFound:
            lost.add(run.id)
    return lost
