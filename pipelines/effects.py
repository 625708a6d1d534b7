"""The effect key: a stable name for the effect of the message an actor runs, for keying that effect.

Delivery is at-least-once, and a few windows remain in which an actor runs a second time for the same
message (README, "What it guarantees"): a worker killed or stalled between its effect and the record of
its completion. An effect keyed by [`current_effect_key`][pipelines.effects.current_effect_key] (a
unique constraint, an upsert, a conditional write) happens once whatever runs twice. The key is the
same across retries, redeliveries, replays and time-limit retries:

* a pipeline step: ``<run id>:<step path>``;
* a message with an idempotency key: that key (prefixed by the actor's name, as it is claimed);
* any other message: its message id (kept by retries and replays).
"""

from __future__ import annotations

from contextvars import ContextVar

from pipelines.context import current_message
from pipelines.errors import PipelinesError

_claimed_key: ContextVar[str | None] = ContextVar("pipelines_claimed_key", default=None)


class NoEffectKey(PipelinesError):
    """``current_effect_key()`` was called outside an actor processing a message."""


def current_effect_key() -> str:
    """The effect key of the message this thread's actor is processing (see the module docstring).

    Raises:
        NoEffectKey: Not called from an actor while it processes a message.
    """
    message = current_message()
    if message is None:
        raise NoEffectKey("current_effect_key() names the effect of a message: call it from the actor that runs one.")
    if message.run_id is not None and message.step is not None:
        return f"{message.run_id}:{message.step}"
    return _claimed_key.get() or message.message_id


def enter_keyed(key: str | None) -> None:
    """Called by the idempotency middleware with the key it claimed for this thread's message (None after)."""
    _claimed_key.set(key)
