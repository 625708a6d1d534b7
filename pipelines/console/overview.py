"""The queues page's data: every actor queue, the last hour's message counts and charts, the workers.

Each source is one that a deployment has without extra services: depths and consumers from RabbitMQ
(AMQP's passive declare), the last hour's counts per actor and the charts from the minutes the workers
add to the run store with their heartbeats (:mod:`pipelines.store.counts`), the workers from their
heartbeats. Only what is being processed now, the rates per second and the oldest message's age need
the workers' metrics endpoints. AMQP reports a queue's ready messages and consumers only, and
RabbitMQ's management API is not used: the unacknowledged deliveries are the sum of what each live
worker of this framework said it holds in its last heartbeat.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pipelines.app import App
from pipelines.config.masking import mask_text
from pipelines.console import scrape
from pipelines.console.charts import hour_charts
from pipelines.console.views import Overview, QueueView, WorkerView
from pipelines.flow.own_actors import unread_note
from pipelines.store.base import WorkerBeat, command_processes
from pipelines.store.counts import LAST_HOUR_MS, ActorCounts, per_actor
from pipelines.wire.naming import dead_letter_queue


class QueuesOverview:
    """Reads the queues page's data (see the module docstring); the metrics at most once a second."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._previous: scrape.Sample | None = None
        self._latest: scrape.Sample | None = None
        self._scraping = threading.Lock()

    def metrics_endpoints(self) -> list[str]:
        ui, metrics = self.app.settings.ui, self.app.settings.metrics
        if ui.metrics_urls:
            return list(ui.metrics_urls)
        if metrics.enabled:
            host = metrics.host.replace("0.0.0.0", "127.0.0.1")
            return [f"http://{host}:{metrics.port}/metrics"]
        return []

    def _sample(self, endpoints: list[str]) -> scrape.Sample:
        """The workers' metrics, read at most once per ``scrape.MIN_INTERVAL_S`` however many ask at once
        (every page view and ``/api/queues`` call would otherwise read every endpoint)."""
        with self._scraping:
            latest = self._latest
            if latest is not None and time.time() - latest.at < scrape.MIN_INTERVAL_S:
                return latest
            sample = scrape.read(endpoints, self.app.settings.namespace)
            self._previous, self._latest = latest, sample
            return sample

    def overview(self) -> Overview:
        """Every actor queue (depth, consumers, dead letters, rate, oldest message's age, the last hour's
        counts), the last hour's charts, and the workers' heartbeats (from the run store: they need no
        ``[metrics]``)."""
        endpoints = self.metrics_endpoints()
        notes: list[str] = []
        sample = self._sample(endpoints) if endpoints else None
        if sample is not None:
            notes += [f"metrics endpoint not answering: {mask_text(why)}" for why in sample.unreachable]
        else:
            notes.append("No metrics endpoint: enable [metrics] in the workers, or set [ui] metrics_urls.")
        depth = getattr(self.app.broker, "queue_depth", None)
        if depth is None:
            notes.append("The embedded broker keeps no queues between processes: depths are not known.")
        now = time.time()
        minutes = self.app.store.message_counts(int(now * 1000) - LAST_HOUR_MS, int(now * 1000))
        hour = per_actor(minutes)
        topology = self.app.broker.topology
        reading: Callable[[str], int | None] | None = getattr(self.app.broker, "queue_consumers", None)
        beats = self.app.store.worker_beats()
        held = unacked_per_queue(beats, self.app.settings.worker.heartbeat_s, now)
        queues = []
        for actor, queue in sorted(topology.actor_queues.items()):
            consume = topology.consume_queues.get(actor, (queue,))
            depths = [depth(q) for q in consume] if depth else []
            consumers = [reading(q) for q in consume] if reading else []
            queues.append(
                QueueView(
                    actor=actor,
                    queue=queue,
                    profile=topology.actor_profiles.get(actor, ""),
                    depth=_total(depths),
                    dead=depth(dead_letter_queue(queue)) if depth else None,
                    consumers=_total(consumers),
                    unacked=sum(held.get(q, 0) for q in consume) if depth else None,
                    processing=sample.in_flight.get(actor, 0.0) if sample and not sample.unreachable else None,
                    rate_per_s=scrape.rate(self._previous, self._latest, "processed", actor) if self._latest else None,
                    failed_per_s=scrape.rate(self._previous, self._latest, "failed", actor) if self._latest else None,
                    oldest_age_s=max((sample.oldest_age_s.get(q, 0.0) for q in consume), default=None)
                    if sample and any(q in sample.oldest_age_s for q in consume)
                    else None,
                    last_hour=hour.get(actor, ActorCounts()),
                )
            )
        note = unread_note(self.app.broker, {q.queue for q in queues if q.consumers == 0})
        notes += [note] if note else []
        workers = worker_views(beats, self.app.settings.worker.heartbeat_s, now)
        return Overview(tuple(queues), workers, tuple(notes), now, hour_charts(minutes))


def worker_views(beats: list[WorkerBeat], interval_s: float, now: float) -> tuple[WorkerView, ...]:
    """Worker processes by their heartbeats (beating every ``interval_s``), as listed (latest first)."""
    now_ms = int(now * 1000)
    processes = command_processes([beat for beat in beats if beat.alive(interval_s, now_ms)])
    return tuple(
        WorkerView(
            beat=beat,
            processes=processes.get((beat.host, beat.parent_pid), 1),
            seen_s_ago=max(0.0, now - beat.beat_at_ms / 1000),
            alive=beat.alive(interval_s, now_ms),
        )
        for beat in beats
    )


def unacked_per_queue(beats: list[WorkerBeat], interval_s: float, now: float) -> dict[str, int]:
    """Per RabbitMQ queue, the deliveries the live workers held unacknowledged at their last heartbeats."""
    held: dict[str, int] = {}
    for beat in beats:
        if beat.alive(interval_s, int(now * 1000)):
            for queue, count in beat.unacked.items():
                held[queue] = held.get(queue, 0) + count
    return held


def _total(counts: list[int | None]) -> int | None:
    """The sum of an actor's queues' counts (its partitions'), None when one of them is not known."""
    return sum(c for c in counts if c is not None) if counts and None not in counts else None
