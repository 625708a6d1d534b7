"""Dead letters: list them, read one, replay them into their runs, purge them.

Every actor queue has a dead-letter queue (``<queue>.dead``) that never expires. A dead letter is
replayed to the actor it failed at with fresh retries and its correlation id; a pipeline step is
replayed inside its original run, which runs again if it had failed. A dead letter is removed from
its queue only once its replay is published, and each one is replayed at most once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import dramatiq
from dramatiq.common import current_millis

from pipelines import options as opt
from pipelines.dead_letters.reasons import DeadLetterAdmin, DeadLetterReason, RawDeadLetter
from pipelines.errors import CannotReplay, DeadLetterError, DeadLetterNotFound, PipelinesError
from pipelines.ids import full_id
from pipelines.store.roles import OnceMarks, StepReplays
from pipelines.wire import naming
from pipelines.wire.codec import MalformedMessage, decode_message
from pipelines.wire.steps import StepAddress
from pipelines.wire.topology import Topology

logger = logging.getLogger(__name__)


class _DeadLetterBroker(DeadLetterAdmin, Protocol):
    """A broker's dead-letter administration, and what a replay needs besides."""

    @property
    def topology(self) -> Topology: ...

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]: ...


@dataclass(frozen=True)
class DeadLetter:
    """A dead letter: its id (the message id), where it lies, why it died and the message itself."""

    id: str
    queue: str
    source_queue: str
    reason: DeadLetterReason
    message: dramatiq.Message[Any] | None
    """None when the body could not be decoded (a malformed message cannot be replayed)."""
    body: bytes


ReplayOutcome = Literal["replayed", "already done", "already replayed"]


class ReplayStore(StepReplays, OnceMarks, Protocol):
    """What a replay needs of the run store: reopen the step in its run, and replay a message once."""


class DeadLetterQueues:
    """The dead-letter queues of one namespace (``app.dead_letters``)."""

    def __init__(self, *, broker: _DeadLetterBroker, store: ReplayStore, retention_s: int) -> None:
        self.broker = broker
        self.store = store
        self.retention_s = retention_s

    def queues(self, queue: str | None = None) -> dict[str, str]:
        """Dead-letter queue → its actor queue; ``queue`` filters by actor, actor queue or DLQ name.

        Raises:
            DeadLetterError: ``queue`` names no actor or queue of this namespace (a typo would
                otherwise read as "no dead letters").
        """
        result = {}
        for actor, source in self.broker.topology.actor_queues.items():
            dead = naming.dead_letter_queue(source)
            if queue is None or queue in (actor, source, dead):
                result[dead] = source
        if queue is not None and not result:
            raise DeadLetterError(
                f"No actor or queue named {queue!r} in this namespace; `pipelines queues` lists them."
            )
        return result

    def list(self, queue: str | None = None, *, limit: int = 100) -> list[DeadLetter]:
        """Up to ``limit`` dead letters per queue, left where they are."""
        return [
            _entry(raw, source)
            for dead, source in self.queues(queue).items()
            for raw in self.broker.peek_dead_letters(dead, limit)
        ]

    def full_id(self, id_or_prefix: str, *, queue: str | None = None) -> str:
        """The id of the dead letter (of ``queue``) with this id, or of the one whose id begins with it, as
        git takes a commit; an id that matches nothing is returned as given.

        Raises:
            AmbiguousId: The ids of several dead letters begin with it.
        """
        return full_id(id_or_prefix, (letter.id for letter in self.list(queue, limit=10_000)), what="dead letter")

    def show(self, letter_id: str) -> DeadLetter:
        """The dead letter with this id, or the one whose id begins with it.

        Raises:
            DeadLetterNotFound: It is in no dead-letter queue of this namespace.
            AmbiguousId: The ids of several dead letters begin with it.
        """
        letters = self.list(limit=10_000)
        letter_id = full_id(letter_id, (letter.id for letter in letters), what="dead letter")
        for letter in letters:
            if letter.id == letter_id:
                return letter
        raise DeadLetterNotFound(f"No dead letter {letter_id} in namespace {self.broker.topology.namespace!r}.")

    def replay(self, letter_id: str, *, queue: str | None = None) -> ReplayOutcome:
        """Send a dead letter back to its actor (inside its run, for a pipeline step) and remove it.

        Raises:
            DeadLetterNotFound: No such dead letter.
            CannotReplay: A malformed message, or a step whose run has ended or expired.
        """
        outcomes: dict[str, ReplayOutcome] = {}

        def replay_it(raw: RawDeadLetter, source: str) -> bool:
            if raw.message_id != letter_id or outcomes:
                return False
            outcomes[letter_id] = self._replay(_entry(raw, source))
            return True

        for dead, source in self.queues(queue).items():
            self.broker.remove_dead_letters(dead, functools.partial(replay_it, source=source))
            if outcomes:
                return outcomes[letter_id]
        raise DeadLetterNotFound(f"No dead letter {letter_id} to replay (replayed or purged already?).")

    def replay_all(
        self, queue: str | None = None, *, reason: str | None = None, limit: int = 10_000
    ) -> dict[str, ReplayOutcome | str]:
        """Replay every dead letter (of ``queue``, dead-lettered for ``reason``), at most ``limit``, in one
        pass over each queue; what happened to each, by id (errors as text)."""
        outcomes: dict[str, ReplayOutcome | str] = {}

        def replay_it(raw: RawDeadLetter, source: str) -> bool:
            letter = _entry(raw, source)
            if len(outcomes) >= limit or (reason is not None and letter.reason.reason != reason):
                return False
            try:
                outcomes[letter.id] = self._replay(letter)
            except PipelinesError as e:
                outcomes[letter.id] = f"not replayed: {e}"
                return False
            return True

        for dead, source in self.queues(queue).items():
            self.broker.remove_dead_letters(dead, functools.partial(replay_it, source=source))
        return outcomes

    def purge(self, queue: str | None = None) -> int:
        """Delete the dead letters (of ``queue``); returns how many."""
        return sum(self.broker.purge_dead_letters(dead) for dead in self.queues(queue))

    def _replay(self, letter: DeadLetter) -> ReplayOutcome:
        if letter.message is None:
            raise CannotReplay(f"Dead letter {letter.id} is not a valid message ({letter.reason.error}); purge it.")
        address = StepAddress.of(letter.message)
        if address is not None:
            why = f"dead letter {letter.id} ({letter.reason.reason})"
            outcome, state = self.store.reopen_step(address.run_id, address.node, reason=why)
            if outcome == "missing":
                raise CannotReplay(f"Run {address.run_id} of dead letter {letter.id} is past its retention; purge it.")
            if outcome == "stopped":
                raise CannotReplay(f"Run {address.run_id} is {state}; its steps can no longer run.")
            if outcome == "not due":
                raise CannotReplay(
                    f"Step {address.node} of run {address.run_id} is not due (its run has not released {state} "
                    f"yet): dead letter {letter.id} is of a message the run did not send; purge it."
                )
            if outcome == "done":
                return "already done"
        once = f"replay:{letter.id}:{letter.reason.at}"
        if not self.store.mark_once(once, retention_s=self.retention_s):
            return "already replayed"
        replayed: dramatiq.Message[Any] = dramatiq.Message(
            **{
                **letter.message.asdict(),
                "message_timestamp": current_millis(),  # a new send: its max_age counts from now
                "options": {
                    **{k: v for k, v in letter.message.options.items() if k not in (opt.TRACEBACK, opt.ETA)},
                    opt.RETRIES: 0,
                    opt.REPLAYED_FROM: letter.reason.at or "dead letter",
                },
            }
        )
        try:
            self.broker.enqueue(replayed)
        except PipelinesError:
            self.store.forget_once(once)
            raise
        logger.info("Replayed dead letter %s to %s.", letter.id, letter.message.actor_name)
        return "replayed"


def _entry(raw: RawDeadLetter, source: str) -> DeadLetter:
    try:
        message: dramatiq.Message[Any] | None = decode_message(raw.body)
    except MalformedMessage:
        message = None
    return DeadLetter(raw.message_id, raw.queue, source, DeadLetterReason.from_headers(raw.headers), message, raw.body)


def describe(letters: Iterable[DeadLetter]) -> list[dict[str, Any]]:
    """Dead letters as plain data (for JSON and the CLI)."""
    return [
        {"id": letter.id, "dead_letter_queue": letter.queue, **{k: v for k, v in vars(letter.reason).items() if v}}
        for letter in letters
    ]
