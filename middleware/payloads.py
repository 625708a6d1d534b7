"""Hands an actor the arguments it was sent: sealed values opened, a typed payload upgraded and validated.

Runs before anything reads a message's arguments (idempotency keys, ordering keys). The message itself
keeps its wire form, so a retry or a dead letter stays sealed and versioned; only what the actor is
called with changes. A value that does not authenticate, a payload that does not validate, or
arguments the actor's function cannot take (calling it would raise TypeError on every retry) are
dead-lettered with the reason and never retried; a payload of a newer schema version than this
worker's is put off until an upgraded worker takes it. Pipeline steps are left to the run: their
arguments were checked when it started. See ``pipelines.payloads.sealing`` and ``pipelines.payloads``.
"""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from pipelines import options as opt
from pipelines.handling.deferral import put_off
from pipelines.handling.outcome import fail_message, outcome_of
from pipelines.payloads.sealing import Sealer, Unsealable, has_sealed
from pipelines.payloads.typed import (
    InvalidArguments,
    InvalidPayload,
    NewerPayload,
    check_arguments,
    check_declaration,
    payload_model,
)
from pipelines.payloads.typed import from_wire as payload_from_wire
from pipelines.wire import option_values as wire_options
from pipelines.wire.steps import StepAddress

logger = logging.getLogger(__name__)

#: How long a message of a newer schema version waits before it is offered to a worker again, in ms.
NEWER_VERSION_RECHECK_MS = 30_000
#: Why this middleware fails a message (dead-lettered with the reason): none of them can ever run.
UNDECRYPTABLE, INVALID_PAYLOAD, INVALID_ARGUMENTS = "undecryptable", "invalid payload", "invalid arguments"
UNUSABLE_ARGUMENTS = frozenset({UNDECRYPTABLE, INVALID_PAYLOAD, INVALID_ARGUMENTS})


class Payloads(Middleware):
    """Opens sealed arguments and validates typed payloads (see the module docstring)."""

    def __init__(self, *, sealer: Sealer | None) -> None:
        self.sealer = sealer

    @property
    def actor_options(self) -> set[str]:
        return {opt.PAYLOAD, opt.SCHEMA_VERSION, opt.UPGRADES, opt.ENCRYPT, opt.SECRET_FIELDS}

    def before_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        check_declaration(actor)
        (self.sealer or Sealer(())).check_declaration(actor)

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        actor = broker.get_actor(message.actor_name)
        sealed = self.sealer is not None and (
            opt.SEALED in message.options or has_sealed([message.args, message.kwargs])
        )
        typed = payload_model(actor) is not None
        try:
            if not sealed and not typed:
                if opt.STEP not in message.options:
                    check_arguments(actor, message.args, message.kwargs)
                return
            args, kwargs = (
                self.sealer.open_message(message, _run_of(message))
                if sealed and self.sealer
                else (message.args, message.kwargs)
            )
            if typed:
                args, kwargs = (payload_from_wire(actor, args, wire_options.schema_version(message.options)),), {}
            elif opt.STEP not in message.options:
                check_arguments(actor, args, kwargs)
        except Unsealable as e:
            logger.error("Dead-lettering %s of %s: %s", message.message_id, message.actor_name, e)
            fail_message(message, UNDECRYPTABLE, e)
            raise SkipMessage from None
        except NewerPayload as e:
            put_off(broker, message, NEWER_VERSION_RECHECK_MS, str(e))
            raise SkipMessage from None
        except InvalidPayload as e:
            logger.error("Dead-lettering %s: %s", message.message_id, e)
            fail_message(message, INVALID_PAYLOAD, e)
            raise SkipMessage from None
        except InvalidArguments as e:
            logger.error("Dead-lettering %s: %s", message.message_id, e)
            fail_message(message, INVALID_ARGUMENTS, e)
            raise SkipMessage from None
        # The actor gets these (``DeliveredMessage``); the message keeps its wire form.
        outcome_of(message).scratch.arguments = (tuple(args), dict(kwargs))


def _run_of(message: dramatiq.broker.MessageProxy) -> str | None:
    """The run a step message belongs to (what an encrypting step's sealed result opens in)."""
    address = StepAddress.best_effort(message)
    return address.run_id if address is not None else None
