"""Every error rabbit-pipelines raises on purpose, under one root.

```text
PipelinesError
├── ConfigError            config.toml or a PIPELINES_* variable is invalid
├── DefinitionError        a pipeline or actor cannot be built as written
│   ├── InvalidActorOption an actor option has a value its middleware cannot use
│   ├── TopologyMismatch   a queue or exchange exists in RabbitMQ with other arguments
│   ├── UnknownActor       a step names an actor nobody declared
│   └── UnknownPipeline    `run NAME` names no registered pipeline
├── ServiceUnavailable     a service does not answer
│   ├── BrokerUnavailable  RabbitMQ
│   │   └── BrokerAccessRefused  it refused the user, password or virtual host
│   └── StoreUnavailable   the run store (Redis or PostgreSQL)
├── PublishError           RabbitMQ did not take a message
│   ├── Unroutable         no queue is bound for its routing key
│   ├── MessageTooLarge    its body is over broker.max_message_bytes
│   └── QueueFull          a queue at its max_length refused it
├── ResultTooLarge         a step returned more than store.max_result_bytes
├── ClaimLost              a step's lease lapsed and another worker claimed it: this attempt's end is not recorded
├── MaxAgeExceeded         a message waited past its max_age (the error of its dead letter)
├── RunNotInStore          a step's run or step is not in the run store (the error of its dead letter)
├── InvalidQuery           a search for runs names a bad state, time or cursor
├── AmbiguousId            an id prefix that several runs or dead letters begin with
├── Cancelled              raised in an actor by report_progress() once its run is cancelled: let it propagate
├── CannotRerun            a run that has not ended, was built on the spot or kept no input
├── DeadLetterError        a dead letter cannot be handled as asked
│   ├── DeadLetterNotFound no dead letter has that id
│   └── CannotReplay       malformed, or its run has ended or expired
└── RunError               waiting on a run did not give a result
    ├── RunNotFound        no such run (never started, or past its retention)
    ├── RunTimeout         it did not finish in time
    ├── RunFailed          it failed; `.error` and `.step` say where
    └── RunCancelled       it was cancelled
```

``NoEffectKey`` (``current_effect_key()`` called outside an actor) derives from the root too; it lives in
``pipelines.effects``.
"""

from __future__ import annotations

from dramatiq.middleware import MiddlewareError


class PipelinesError(Exception):
    """Root of every error raised on purpose by this package."""


class CarriedFailure(PipelinesError):
    """A step's failure as its message carried it (the exception itself is gone): its type's name and text."""

    def __init__(self, type_name: str, text: str) -> None:
        super().__init__(text)
        self.type_name = type_name


def error_name(error: BaseException) -> str:
    """The name of an error's type, as it was raised (a carried failure keeps the original's)."""
    return error.type_name if isinstance(error, CarriedFailure) else type(error).__name__


class ConfigError(PipelinesError):
    """The configuration is invalid; the message names the key, the value and the expected form."""


class DefinitionError(PipelinesError):
    """A pipeline, step or actor cannot be built as written."""


class InvalidActorOption(DefinitionError, MiddlewareError):
    """An actor option's value cannot be used; raised while the actor is declared.

    It is a Dramatiq ``MiddlewareError`` so that it stops the declaration instead of being logged.
    """


class UnknownActor(DefinitionError):
    """A step names an actor that is not declared on the broker."""


class UnknownPipeline(DefinitionError):
    """No pipeline is registered under the requested name."""


class ServiceUnavailable(PipelinesError):
    """A service the framework needs does not answer."""


class BrokerUnavailable(ServiceUnavailable):
    """RabbitMQ does not answer (or dropped the connection and did not come back)."""


class BrokerAccessRefused(BrokerUnavailable):
    """RabbitMQ refused the login (user, password or virtual host): trying again will not help."""


class StoreUnavailable(ServiceUnavailable):
    """The run store does not answer."""


class TopologyMismatch(DefinitionError):
    """A queue or exchange exists in RabbitMQ with other arguments than the configuration declares."""


class PublishError(PipelinesError):
    """RabbitMQ did not accept a message."""


class Unroutable(PublishError):
    """RabbitMQ returned the message: no queue is bound for its routing key."""


class QueueFull(PublishError):
    """A queue at its ``max_length`` refused a message; ``queue`` and ``depth`` say which and how full."""

    def __init__(self, message: str, *, queue: str, depth: int) -> None:
        super().__init__(message)
        self.queue = queue
        self.depth = depth


class MessageTooLarge(PublishError):
    """The encoded message is larger than ``broker.max_message_bytes``."""


class InvalidQuery(PipelinesError):
    """A search for runs (``app.runs``, ``pipelines runs``) names a bad state, time or cursor."""


class ResultTooLarge(PipelinesError):
    """A step returned a result larger than ``store.max_result_bytes``."""


class ClaimLost(PipelinesError):
    """A step's attempt lost its claim: its lease lapsed (its worker was frozen or cut off) and another
    worker claimed the step, or its own retry did, and that attempt now decides it. This one's result is
    not recorded; a failure ends only this attempt's own entry in the step's history."""


class MaxAgeExceeded(PipelinesError):
    """A message was older than its ``max_age`` when a worker took it: dead-lettered instead of run."""


class RunNotInStore(PipelinesError):
    """A step's message names a run or step the run store does not hold (expired, never created, or the
    store lost its data): dead-lettered instead of run."""


class AmbiguousId(PipelinesError):
    """A shortened id that the ids of several runs (or dead letters) begin with; the message lists them."""


class DeadLetterError(PipelinesError):
    """A dead letter cannot be handled as asked."""


class DeadLetterNotFound(DeadLetterError):
    """No dead letter has this id (replayed or purged already, or never there)."""


class CannotReplay(DeadLetterError):
    """The dead letter cannot be replayed; the message says why and what to do."""


class CannotRerun(PipelinesError):
    """A run cannot be re-run; the message says why."""


class RunError(PipelinesError):
    """Waiting on a run did not produce a result."""


class RunNotFound(RunError):
    """No run with this id exists (never started, or past its retention)."""


class RunTimeout(RunError):
    """The run did not finish within the time given to ``wait``."""


class RunFailed(RunError):
    """The run failed; ``step`` and ``error`` say which step and why."""

    def __init__(self, run_id: str, step: str | None, error: str | None) -> None:
        self.run_id = run_id
        self.step = step
        self.error = error
        super().__init__(f"run {run_id} failed at step {step}: {error}")


class RunCancelled(RunError):
    """The run was cancelled before it finished."""


class Cancelled(PipelinesError):
    """Raised in an actor by ``report_progress``/``check_cancelled`` once its run is cancelled.

    Let it propagate: the job stops there, is not retried and not dead-lettered, and the run stays
    ``cancelled``.
    """
