"""Worker processes as the console and `pipelines workers` list them, from their heartbeats in the run store."""

from __future__ import annotations

import dataclasses
import time

from pipelines.console.overview import worker_views
from pipelines.store import embedded_store
from pipelines.store.base import WorkerBeat


def test_a_worker_that_stopped_beating_shows_as_gone_and_its_command_counts_only_live_processes() -> None:
    store = embedded_store(namespace="workers", retention_s=60)
    now_ms = int(time.time() * 1000)
    killed = WorkerBeat(
        worker_id="web-1:11",
        host="web-1",
        pid=11,
        parent_pid=10,
        threads=4,
        queues=("default",),
        processed=7,
        failed=2,
        running=("charge 3f/0.0",),
        started_at_ms=now_ms - 60_000,
        beat_at_ms=now_ms - 4_000,  # four beats of 1 s missed
    )
    store.beat(killed, keep_ms=60_000)
    for pid in (12, 13):  # two live processes of the same `dramatiq` command
        store.beat(dataclasses.replace(killed, worker_id=f"web-1:{pid}", pid=pid, beat_at_ms=now_ms), keep_ms=60_000)

    views = worker_views(store.worker_beats(), 1.0, now_ms / 1000)

    assert sorted((v.beat.pid, v.alive, v.processes) for v in views) == [(11, False, 2), (12, True, 2), (13, True, 2)]
    assert views[-1].beat == killed  # latest first: the one that stopped beating comes last
    store.forget_worker("web-1:12")
    assert sorted(beat.pid for beat in store.worker_beats()) == [11, 13]
