"""Runs a standalone actor's message once per idempotency key.

An actor declares ``idempotency_key`` (a string, or a callable given the message's arguments by the
actor's parameter names, such as ``lambda order_id, **_: f"charge-{order_id}"``); a message can carry
its own. Before the message
runs, its key is claimed in the run store under a lease: a key already done is skipped (acknowledged,
counted, logged once), a key held by another worker is put off until that worker finishes or its lease
lapses. The key is recorded done only after success, so a failure leaves it free for the retry.
Pipeline steps are keyed by their run and step already (``PipelineSteps``) and are left alone here.

Recording a key done survives a store that stalls (``pipelines.handling.recording``): it is tried again within
the key's lease, and if it still cannot be done the key travels with a copy of the message put off in the
delay queues (``idempotency_done``), whose delivery records it without running the actor again; a
duplicate meanwhile finds the key held and is put off. A release after a failure is tried once: a key
left held only makes the retry wait for the lease to lapse.

A worker killed between an actor's side effect and the completion record re-runs the message once its
lease lapses: make the effect itself keyed (a unique constraint, an upsert) for exactly-once effects.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from pipelines import options as opt
from pipelines.effects import enter_keyed
from pipelines.errors import DefinitionError, InvalidActorOption, PublishError, ServiceUnavailable
from pipelines.handling.deferral import STORE_DOWN_RETRY_DELAY_MS, put_off, put_off_while_store_down
from pipelines.handling.holds import Holds
from pipelines.handling.outcome import KeyClaim, fail_message, outcome_of
from pipelines.handling.recording import carry, record_within_lease
from pipelines.store.roles import KeyClaims
from pipelines.wire import option_values as wire_options

logger = logging.getLogger(__name__)

#: Longest a message whose key another worker holds waits before it looks again, in ms.
BUSY_RECHECK_MS = 30_000


class Idempotency(Middleware):
    """Claims, records and releases idempotency keys (see the module docstring)."""

    def __init__(self, *, store: KeyClaims, holds: Holds, retention_s: int) -> None:
        self.store = store
        self.holds = holds
        self.lease_ms = int(holds.lease_s * 1000)
        self.retention_s = retention_s
        self.duplicates_skipped = 0

    @property
    def actor_options(self) -> set[str]:
        return {opt.IDEMPOTENCY_KEY}

    def before_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        key = actor.options.get(opt.IDEMPOTENCY_KEY)
        if key is not None and not (isinstance(key, str) or callable(key)):
            raise InvalidActorOption(
                f"Actor {actor.actor_name!r}: idempotency_key={key!r} must be a string or a function of the "
                "actor's arguments, such as lambda order_id, **_: f'charge-{order_id}'."
            )

    def key_of(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> str | None:
        """The message's key, prefixed by its actor's name; None when it has none (or is a pipeline step).

        Raises:
            DefinitionError: The actor's key function does not accept the message's arguments.
        """
        if opt.STEP in message.options:
            return None
        actor = broker.get_actor(message.actor_name)
        key: str | Callable[..., Any] | None = wire_options.idempotency_key(message.options)
        if key is None:
            key = actor.options.get(opt.IDEMPOTENCY_KEY)
        if callable(key):
            try:
                arguments = inspect.signature(actor.fn).bind(*message.args, **message.kwargs).arguments
                key = key(**arguments)
            except Exception as e:
                raise DefinitionError(
                    f"The idempotency_key of actor {actor.actor_name!r} failed on its arguments: "
                    f"{type(e).__name__}: {e}. It is called with the actor's parameters by name."
                ) from None
        return None if key is None else f"{message.actor_name}:{key}"

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        carried = wire_options.key_done(message.options)
        if carried is not None:
            self._record_carried(broker, message, carried)
            raise SkipMessage
        try:
            key = self.key_of(broker, message)
        except DefinitionError as e:
            # Running without the key would defeat it: the message is dead-lettered with the reason.
            logger.error("%s", e)
            fail_message(message, "permanent error", e)
            raise SkipMessage from None
        if key is None:
            return
        holder = uuid.uuid4().hex
        try:
            outcome, wait_ms = self.store.claim_key(key, holder=holder, lease_ms=self.lease_ms)
        except ServiceUnavailable as e:
            put_off_while_store_down(broker, message, e)
            raise SkipMessage from None
        if outcome == "run":
            outcome_of(message).scratch.key_claim = KeyClaim(key, holder, self.holds.key(key, holder))
            enter_keyed(key)
            return
        if outcome == "done":
            self.duplicates_skipped += 1
            outcome_of(message).duplicate = True
            logger.info("Skipping %s: idempotency key %r is done already.", message.message_id, key)
        else:
            put_off(broker, message, min(wait_ms, BUSY_RECHECK_MS), f"another worker holds key {key!r}")
        raise SkipMessage

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self._settle(broker, message, succeeded=exception is None)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        # A hook after this one stopped the message after its key was claimed: let the key go at once,
        # so the copy that was put off (or replayed) does not wait for the lease to lapse.
        self._settle(broker, message, succeeded=False)

    def _settle(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, *, succeeded: bool) -> None:
        claim = outcome_of(message).scratch.key_claim
        if claim is None:
            return
        enter_keyed(None)
        outcome_of(message).scratch.key_claim = None
        if claim.hold is not None:
            self.holds.release(claim.hold)
        if succeeded:
            self._finish(broker, message, claim)
            return
        try:
            self.store.release_key(claim.key, holder=claim.holder)
        except ServiceUnavailable as e:
            # Held until its lease lapses: the retry waits that long, and still runs once.
            logger.warning("Could not release idempotency key %r of %s: %s", claim.key, message.message_id, e)

    def _finish(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, claim: KeyClaim) -> None:
        """Record the key done, within its lease; else a copy of the message carries it to be recorded."""
        try:
            record_within_lease(
                lambda: self.store.finish_key(claim.key, retention_s=self.retention_s),
                lease_end=claim.hold.lease_end if claim.hold is not None else 0.0,
                what=f"idempotency key {claim.key!r} done",
            )
        except (ServiceUnavailable, PublishError) as e:
            why = f"idempotency key {claim.key!r} could not be recorded done yet ({e})"
            carry(broker, message, opt.KEY_DONE, claim.key, why)

    def _record_carried(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, key: str) -> None:
        """Record a key a message carries (its actor ran already) done; put it off again while the store
        does not answer."""
        try:
            self.store.finish_key(key, retention_s=self.retention_s)
        except ServiceUnavailable as e:
            put_off(broker, message, STORE_DOWN_RETRY_DELAY_MS, f"its idempotency key could not be recorded yet ({e})")
            return
        logger.info("Recorded idempotency key %r done, carried by %s.", key, message.message_id)
