"""Names of everything declared in RabbitMQ and written to the run store.

Pure functions of the namespace, so two environments (or two test runs) never share a queue, an
exchange or a key, and an operator can predict every name from ``config.toml``.
"""

from __future__ import annotations

import hashlib
import os
import re

_NAMESPACE_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_TOPIC_RE = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_PATTERN_WORD_RE = re.compile(r"[A-Za-z0-9_-]+|\*|#")
#: AMQP 0-9-1 limit on routing keys and queue names, in bytes.
MAX_NAME_BYTES = 255


def is_valid_namespace(namespace: str) -> bool:
    """Namespaces are lower-case words: they prefix queue names and Redis keys."""
    return _NAMESPACE_RE.fullmatch(namespace) is not None


def is_valid_actor_name(actor_name: str) -> bool:
    """Actor names are single routing-key words (no dots): bindings match them word by word."""
    return _WORD_RE.fullmatch(actor_name) is not None


def is_valid_topic(topic: str) -> bool:
    """Event topics are dot-separated words, such as ``order.placed``."""
    return len(topic.encode()) <= MAX_NAME_BYTES and _TOPIC_RE.fullmatch(topic) is not None


def is_valid_topic_pattern(pattern: str) -> bool:
    """Subscription patterns are topics whose words may be ``*`` (one word) or ``#`` (any)."""
    return len(pattern.encode()) <= MAX_NAME_BYTES and all(
        _PATTERN_WORD_RE.fullmatch(word) for word in pattern.split(".")
    )


def work_exchange(namespace: str) -> str:
    """Topic exchange that carries actor and pipeline messages; every actor queue is bound to it."""
    return f"{namespace}.work"


def events_exchange(namespace: str) -> str:
    """Topic exchange for domain events; subscribing actors bind their queue with a pattern."""
    return f"{namespace}.events"


def dead_letter_exchange(namespace: str) -> str:
    """Direct exchange that routes rejected messages to their queue's dead-letter queue."""
    return f"{namespace}.dead"


def delay_exchange(namespace: str) -> str:
    """Headers exchange that routes delayed messages to the delay queue of their tier."""
    return f"{namespace}.delay"


def actor_queue(namespace: str, queue_name: str, actor_name: str) -> str:
    """One queue per actor, so the work exchange can copy one message to several actors."""
    return f"{namespace}.{queue_name}.{actor_name}"


def dead_letter_queue(queue: str) -> str:
    """Where a queue's rejected messages wait for inspection and replay."""
    return f"{queue}.dead"


def readers_queue(queue: str) -> str:
    """A queue that never holds a message: each worker reading long-running queue ``queue`` (which it
    polls, so RabbitMQ counts no consumer on it) subscribes to it, so its consumers are the readers."""
    return f"{queue}.readers"


def partition_queue(queue: str, partition: int) -> str:
    """The queue of one partition of an ordered actor's queue."""
    return f"{queue}.p{partition}"


def partition_routing_key(actor_name: str, partition: int) -> str:
    """The routing key of a message to one partition of an ordered actor.

    ``~`` cannot appear in an actor name, so no other actor's ``#.<name>.#`` binding matches it.
    """
    return f"{actor_name}.~{partition}"


def delay_queue(namespace: str, tier_ms: int) -> str:
    """A delay tier: messages wait ``tier_ms`` here, then dead-letter back to the work exchange."""
    return f"{namespace}.delay.{tier_ms}ms"


def actor_binding_key(actor_name: str) -> str:
    """Binding of an actor queue to the work exchange: any routing key that contains its name."""
    return f"#.{actor_name}.#"


def routing_key_for(actor_names: list[str]) -> str:
    """Routing key that the work exchange copies to each of these actors' queues."""
    return ".".join(sorted(set(actor_names)))


def run_key(namespace: str, run_id: str) -> str:
    """Run-store key of a run's record; the run's other keys extend it.

    The run id is a hash tag (``{...}``): on a Redis Cluster every key of one run is in one slot, so
    each of the store's scripts touches one slot, and runs spread evenly over the shards.
    """
    return f"{namespace}:run:{{{run_id}}}"


def new_id() -> str:
    """A random id of 32 hex digits (128 bits), for runs and correlation ids: what ``uuid4().hex``
    gives, in a fifth of its CPU (no UUID object is built)."""
    return os.urandom(16).hex()


def new_message_id() -> str:
    """A random message id in Dramatiq's form (``8-4-4-4-12`` hex digits), without building a UUID."""
    digits = os.urandom(16).hex()
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def run_id_for_key(namespace: str, idempotency_key: str) -> str:
    """The id of the run an idempotency key starts: derived from the key, so finding the run a key
    started needs no mapping key of its own (which a Redis Cluster would keep in another slot)."""
    return hashlib.sha256(f"{namespace}\0{idempotency_key}".encode()).hexdigest()[:32]


def idempotency_record_key(namespace: str, key: str) -> str:
    """Run-store key recording that a standalone actor's idempotency key is held or done."""
    return f"{namespace}:idem:{key}"


def once_key(namespace: str, key: str) -> str:
    """Run-store key marking that something (a replay) happened once."""
    return f"{namespace}:once:{key}"


def recent_runs_key(namespace: str) -> str:
    """Run-store key of the index of the namespace's retained runs by creation time (epoch ms)."""
    return f"{namespace}:runs"


def pipeline_runs_key(namespace: str, pipeline: str) -> str:
    """Run-store key of the index of the namespace's retained runs of ``pipeline`` by creation time."""
    return f"{namespace}:runs:p:{pipeline}"


def local_steps_key(namespace: str) -> str:
    """Run-store key of the index of steps claimed where the step before them finished (local steps),
    member ``<run id> <that step's id>``, scored by when their lease would lapse (epoch ms): the lapse
    sweep reads only the entries due, and publishes again a local step whose worker died."""
    return f"{namespace}:runs:local"


def running_runs_key(namespace: str) -> str:
    """Run-store key of the index of the namespace's running runs by when each was last touched (epoch
    ms, as the stall sweep last saw it): the sweep reads only the entries older than its threshold."""
    return f"{namespace}:runs:running"


def worker_key(namespace: str, worker_id: str) -> str:
    """Run-store key of one worker process's latest heartbeat (``host:pid``), which lapses unless renewed."""
    return f"{namespace}:worker:{worker_id}"


def workers_key(namespace: str) -> str:
    """Run-store key of the index of the namespace's worker processes by their latest heartbeat (epoch ms)."""
    return f"{namespace}:workers"


def counts_key(namespace: str, minute_ms: int) -> str:
    """Run-store key of the message counts of every actor in the minute starting at ``minute_ms`` (epoch ms)."""
    return f"{namespace}:counts:{minute_ms}"


def stall_sweep_key(namespace: str) -> str:
    """Run-store key of the stall sweep's clock: when it last looked, and since when without a gap."""
    return f"{namespace}:stalls"


def lease_key(namespace: str, lease_id: str) -> str:
    """Run-store key of a long-running job's lease: its holder, expiry and message."""
    return f"{namespace}:lease:{lease_id}"


def tick_key(namespace: str, job: str, tick_ms: int) -> str:
    """Run-store key counting the claims of one tick of a scheduled job."""
    return f"{namespace}:tick:{{{job}}}:{tick_ms}"  # the job is a hash tag: one slot with its schedule key


def sweep_key(namespace: str, job: str) -> str:
    """Run-store key of the tick up to which a scheduled job's ticks were swept for missed ones."""
    return f"{namespace}:swept:{{{job}}}"  # the job is a hash tag: one slot with its ticks


def schedule_key(namespace: str, job: str) -> str:
    """Run-store key of the last tick a scheduled job ran (or skipped on purpose)."""
    return f"{namespace}:schedule:{{{job}}}"
