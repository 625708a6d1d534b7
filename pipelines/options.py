"""Names of the message and actor options this package reads and writes.

Dramatiq keeps all message metadata in ``Message.options``; these constants are the only place the
keys are spelled, so a typo is a NameError rather than a silently ignored option.
"""

from __future__ import annotations

from typing import Final

#: Message option: where a pipeline step sits in its run (see ``pipelines.wire.steps.StepAddress``).
STEP: Final = "pipeline_step"
#: Message option: per-actor branch data of a message the work exchange copies to several queues.
BRANCHES: Final = "pipeline_branches"
#: Message option: the topic of a domain event.
EVENT_TOPIC: Final = "event_topic"
#: Message option: when (epoch milliseconds) a delayed message is due.
ETA: Final = "eta"
#: Message option: a step's result (JSON text) that the run store could not record when the step ran;
#: the message carries it so that its next delivery records it without running the actor again.
STEP_RESULT: Final = "pipeline_result"
#: Message option: a step's final failure ({"reason", "error_type", "error"}) that the run store could not
#: record; the message carries it so that its next delivery records it, then is dead-lettered with it.
STEP_FAILURE: Final = "pipeline_failure"
#: Message option: the idempotency key a standalone message ran for, which the run store could not record
#: done when it ran; the message carries it so that its next delivery records it without running the actor.
KEY_DONE: Final = "idempotency_done"
#: Message option: the name of the registered pipeline a step belongs to.
PIPELINE: Final = "pipeline_name"

#: Message option: the correlation id every message enqueued while handling this one inherits.
CORRELATION: Final = "correlation_id"
#: Message option (Dramatiq's own): how many times the message was retried so far.
RETRIES: Final = "retries"
#: Message option (Dramatiq's own): when (epoch milliseconds) the message last failed and was counted.
REQUEUE_TIMESTAMP: Final = "requeue_timestamp"
#: Message option (Dramatiq's own): an excerpt of the last failure's traceback.
TRACEBACK: Final = "traceback"
#: Message option (Dramatiq's own): the time limit of this message, in milliseconds.
TIME_LIMIT: Final = "time_limit"
#: Message option: W3C trace context (traceparent, tracestate) of the span that published this message.
TRACE: Final = "trace_context"
#: Message option: trace parents of the spans a chord callback links to (its members).
TRACE_LINKS: Final = "trace_links"
#: Message option: the dead letter this message was replayed from.
REPLAYED_FROM: Final = "replayed_from"

#: Actor/message option: the key that makes a standalone actor's message run once (a string, or a
#: callable given the actor's arguments).
IDEMPOTENCY_KEY: Final = "idempotency_key"
#: Actor option: longest a call may run, in seconds (default: ``[worker] time_limit_s``).
TIMEOUT: Final = "timeout_s"
#: Actor/message options (Dramatiq's own): the retry policy.
MAX_RETRIES: Final = "max_retries"
MIN_BACKOFF: Final = "min_backoff"
MAX_BACKOFF: Final = "max_backoff"
THROWS: Final = "throws"
RETRY_WHEN: Final = "retry_when"
#: Actor/message option (Dramatiq's own): the actor sent ``(message, {"retries", "max_retries"})``
#: when a message's retries are exhausted.
ON_RETRY_EXHAUSTED: Final = "on_retry_exhausted"

#: Message option (Dramatiq's RabbitMQ broker): a per-message priority, refused here (see ``pipelines.priority``).
BROKER_PRIORITY: Final = "broker_priority"

#: Actor option: topic patterns (``order.*``, ``#``) whose events the actor receives.
SUBSCRIBE: Final = "subscribe"
#: Actor/message option (Dramatiq's own): do not append the previous step's result to the arguments.
PIPE_IGNORE: Final = "pipe_ignore"

#: Actor option: the actor's profile (see ``pipelines.profiles``).
PROFILE: Final = "profile"
#: Actor option (ordered): how many partitions (queues) the actor's messages are spread over.
PARTITIONS: Final = "partitions"
#: Actor/message option (ordered): the key whose messages are processed one at a time, in order (a
#: parameter name, or a callable given the actor's arguments).
ORDERING_KEY: Final = "ordering_key"
#: Message option (ordered): the partition the message's key falls in.
PARTITION: Final = "partition"
#: Actor option (periodiq's own): the cron schedule.
PERIODIC: Final = "periodic"
#: Message option (periodiq's own): the tick a scheduled message was sent for.
SCHEDULED_AT: Final = "scheduled_at"
#: Actor option (scheduled): what happens to ticks missed while no scheduler ran ("skip", "catch_up").
MISSED: Final = "missed"
#: Message option (scheduled): the missed tick a catch-up message stands for.
CATCH_UP_OF: Final = "catch_up_of"
#: Actor option (long_running): seconds of the lease a running job renews by heartbeat.
LEASE: Final = "lease_s"
#: Actor option (long_running): what happens to a job whose worker died ("retry", "fail").
ON_LOST: Final = "on_lost"

#: Actor option: the pydantic model of the actor's one argument.
PAYLOAD: Final = "payload"
#: Actor/message option: the version of that model (an int, from 1).
SCHEMA_VERSION: Final = "schema_version"
#: Actor option: {older version: function(dict) -> dict of the next version}, to accept older messages.
UPGRADES: Final = "upgrades"
#: Actor option: encrypt the whole argument list of every message.
ENCRYPT: Final = "encrypt"
#: Actor option: names of payload fields (or keyword arguments) to encrypt.
SECRET_FIELDS: Final = "secret_fields"
#: Message option: the encrypted arguments of a message whose actor encrypts them all.
SEALED: Final = "sealed"
#: Actor option: at most this many messages per second/minute/hour reach the actor ("20/s").
RATE_LIMIT: Final = "rate_limit"
#: Actor option: False sends every step of the actor through RabbitMQ, never run where the step before
#: it finished (see ``pipelines.flow.local_steps``).
LOCAL_STEPS: Final = "local_steps"
#: Message option: the rate-limit slot (epoch ms, the run store's clock) reserved for this message.
RATE_SLOT: Final = "rate_slot"
#: Message option: the rate limit ("10/s") of the registered pipeline whose run this first step starts.
PIPELINE_RATE_LIMIT: Final = "pipeline_rate_limit"
#: Actor option: the most messages the actor's queue holds; publishes beyond are refused.
MAX_LENGTH: Final = "max_length"
#: Message option (embedded broker): the message waited in a worker's delay queue and comes back due;
#: it was prepared for the wire when first published.
DUE: Final = "pipelines_due"
