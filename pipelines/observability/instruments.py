"""The metric families of workers: names, help texts, labels and buckets, and their zero series.

A labelled family has no series until its first increment, and in prometheus-client's multiprocess mode
no family at all: a dashboard or an alert on ``pipelines_messages_failed_total`` would see nothing, not
zero, until something failed. :func:`zero_series` creates, when a worker boots, each series that its
actors and the registered pipelines can have, at zero. Not the time of a scheduled job's last run: zero
would read as a run in 1970 and fire the missed-run alert; it appears with the job's first run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dramatiq
    from prometheus_client import CollectorRegistry

#: Step durations, in seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
#: Partition lag, in seconds.
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
#: Run durations and chord waits, in seconds.
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: The families labelled by queue and actor, created at zero for every actor.
PER_ACTOR = ("processed", "failed", "retried", "dead_lettered", "duplicates", "dropped", "duration", "in_flight")
#: The families labelled by pipeline, created at zero for every registered pipeline.
PER_PIPELINE = ("run_duration", "chord_wait")
#: How a run can end, as ``pipelines_runs_total`` counts it.
RUN_OUTCOMES = ("succeeded", "failed")


def zero_series(families: dict[str, Any], broker: dramatiq.Broker, pipelines: Sequence[str]) -> None:
    """Create, at zero, every series the actors of ``broker`` and the ``pipelines`` can have (see the
    module docstring)."""
    topology = getattr(broker, "topology", None)
    for actor in list(broker.actors.values()):
        name = actor.actor_name
        for family in PER_ACTOR:
            families[family].labels(actor.queue_name, name)
        families["steps_lost"].labels(name)
        for hop in ("local", "routed"):
            families["hops"].labels(name, hop)
        if actor.options.get("periodic") is not None:
            families["schedule_missed"].labels(name)
        partitions = topology.consume_queues.get(name, ()) if topology is not None else ()
        if topology is not None and topology.actor_profiles.get(name) == "ordered":
            for partition in range(len(partitions)):
                families["partition_lag"].labels(name, str(partition))
    for middleware in broker.middleware:
        if getattr(middleware, "fails_open", False):
            for hook in ("before_process_message", "after_process_message"):
                families["middleware_failures"].labels(type(middleware).__name__, hook)
    for pipeline in pipelines:
        for family in PER_PIPELINE:
            families[family].labels(pipeline)
        for outcome in RUN_OUTCOMES:
            families["runs"].labels(pipeline, outcome)


def instruments(registry: CollectorRegistry) -> dict[str, Any]:
    """The worker's metric families on ``registry``, by the name the middleware uses."""
    from prometheus_client import Counter, Gauge, Histogram

    message = ["queue", "actor"]

    def counter(name: str, text: str, labels: Iterable[str] = message) -> Any:
        return Counter(name, text, list(labels), registry=registry)

    return {
        "processed": counter("pipelines_messages_processed", "Messages processed (succeeded or failed)."),
        "failed": counter("pipelines_messages_failed", "Messages whose actor raised."),
        "retried": counter("pipelines_messages_retried", "Retries scheduled."),
        "dead_lettered": counter("pipelines_messages_dead_lettered", "Messages rejected to a dead-letter queue."),
        "duplicates": counter("pipelines_messages_duplicates_skipped", "Duplicates skipped by their key."),
        "dropped": counter("pipelines_messages_dropped", "Fire-and-forget messages dropped after their retries."),
        "hops": counter(
            "pipelines_step_hops",
            "Steps that followed another, run where it finished (hop=local) or published (hop=routed).",
            ["actor", "hop"],
        ),
        "steps_lost": counter(
            "pipelines_steps_lost",
            "Step attempts whose end found their step claimed again (after their lease lapsed, or by their retry).",
            ["actor"],
        ),
        "middleware_failures": counter(
            "pipelines_middleware_failures", "Hooks of observational middleware that raised.", ["middleware", "hook"]
        ),
        "partition_lag": Histogram(
            "pipelines_partition_lag_seconds",
            "Ordered actors: time from publish to the start of processing, per partition.",
            ["actor", "partition"],
            buckets=LAG_BUCKETS,
            registry=registry,
        ),
        "duration": Histogram(
            "pipelines_message_duration_seconds",
            "Time an actor took.",
            message,
            buckets=DURATION_BUCKETS,
            registry=registry,
        ),
        "in_flight": Gauge(
            "pipelines_messages_in_flight",
            "Messages being processed.",
            message,
            multiprocess_mode="livesum",
            registry=registry,
        ),
        "runs": counter("pipelines_runs", "Pipeline runs that ended, by outcome.", ["pipeline", "outcome"]),
        "run_duration": Histogram(
            "pipelines_run_duration_seconds",
            "Run duration, creation to end.",
            ["pipeline"],
            buckets=RUN_BUCKETS,
            registry=registry,
        ),
        "chord_wait": Histogram(
            "pipelines_chord_wait_seconds",
            "Time a chord barrier waited between its first and last member.",
            ["pipeline"],
            buckets=RUN_BUCKETS,
            registry=registry,
        ),
        "queue_head": Gauge(
            "pipelines_queue_head_published_timestamp_seconds",
            "When the newest message a worker started from each RabbitMQ queue was published.",
            ["queue"],
            multiprocess_mode="max",
            registry=registry,
        ),
        "heartbeat": Gauge(
            "pipelines_worker_heartbeat_timestamp_seconds",
            "When each worker process was last alive.",
            multiprocess_mode="liveall",
            registry=registry,
        ),
        "schedule_last_run": Gauge(
            "pipelines_schedule_last_run_timestamp_seconds",
            "When each scheduled job last ran.",
            ["actor"],
            multiprocess_mode="max",
            registry=registry,
        ),
        "schedule_last_tick": Gauge(
            "pipelines_schedule_last_tick_timestamp_seconds",
            "When the scheduler last sent each scheduled job.",
            ["actor"],
            multiprocess_mode="max",
            registry=registry,
        ),
        "schedule_missed": counter(
            "pipelines_schedule_missed_ticks", "Ticks of scheduled jobs that no scheduler sent.", ["actor"]
        ),
        "schedule_interval": Gauge(
            "pipelines_schedule_interval_seconds",
            "Expected time between two runs of each scheduled job.",
            ["actor"],
            multiprocess_mode="max",
            registry=registry,
        ),
    }
