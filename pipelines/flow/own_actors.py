"""The framework's own actors (run deadlines, the lease watchdog, the schedule check) live on Dramatiq
queue ``pipelines``. A deployment whose workers all run with other ``--queues`` leaves them unread:
this module names their RabbitMQ queues and says, in one sentence, what that leaves undone."""

from __future__ import annotations

from collections.abc import Collection

import dramatiq

from pipelines.flow.deadlines import DEADLINE_QUEUE

#: What is left undone while no worker reads the framework's own queue.
LEFT_UNDONE = "run deadlines are not enforced, lapsed leases are not re-driven and missed ticks are not counted"


def own_queues(broker: dramatiq.Broker) -> set[str]:
    """The RabbitMQ queues of the framework's own actors on ``broker``."""
    topology = getattr(broker, "topology", None)
    if topology is None:
        return set()
    return {
        queue
        for actor, queue in topology.actor_queues.items()
        if actor in broker.actors and broker.get_actor(actor).queue_name == DEADLINE_QUEUE
    }


def unread_note(broker: dramatiq.Broker, unread: Collection[str]) -> str | None:
    """A sentence when no worker reads the queues of the framework's own actors (``unread`` are the
    queues no worker reads now); None when one does."""
    own = own_queues(broker)
    if not own or not own <= set(unread):
        return None
    return (
        f"No worker reads Dramatiq queue {DEADLINE_QUEUE!r}, the framework's own actors: {LEFT_UNDONE}. "
        f"Start a worker without --queues, or with {DEADLINE_QUEUE!r} among them."
    )
