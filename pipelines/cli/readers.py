"""Which queues no worker reads now, and what that leaves undone: told by `queues`, `topology` and `run`.

A queue without a consumer is not an error (a worker may be starting), but its messages wait. Two cases
are named in words: a run that does not start because no worker reads its first step's queue, and the
framework's own actors (run deadlines, lapsed leases, missed ticks) on Dramatiq queue ``pipelines``,
which workers started with other ``--queues`` leave out.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pipelines.errors import BrokerUnavailable
from pipelines.flow.own_actors import unread_note

if TYPE_CHECKING:
    from pipelines.app import App
    from pipelines.broker import ExchangeBroker
    from pipelines.store.base import RunStatus
    from pipelines.wire.topology import Queue


def unread(broker: ExchangeBroker, queue: Queue) -> bool:
    """An actor queue that no worker reads now (no worker runs, or only workers for other ``--queues``):
    its messages wait. A queue not declared yet is not marked (``pipelines queues`` says ``missing``)."""
    return queue.role == "actor" and broker.queue_consumers(queue.name) == 0


def unread_queues(app: App) -> set[str] | None:
    """The actor queues no worker reads now, or None when that cannot be known (the embedded broker, or
    RabbitMQ not answering: then said on stderr, and the topology is shown without it)."""
    from pipelines.broker import ExchangeBroker

    broker = app.broker
    if not isinstance(broker, ExchangeBroker):
        return None
    try:
        return {queue.name for queue in broker.topology.queues if unread(broker, queue)}
    except BrokerUnavailable as e:
        print(f"pipelines: which queues have no consumer is not shown: {e}", file=sys.stderr)
        return None


def framework_note(app: App, unread: set[str]) -> str | None:
    """A sentence when no worker reads the queues of the framework's own actors (None when one does)."""
    return unread_note(app.broker, unread)


def waiting_note(app: App, status: RunStatus) -> str:
    """Why a run that did not end may not move: the first step not started, when no worker reads its
    queue (empty when one does, or when it cannot be known)."""
    from pipelines.broker import ExchangeBroker

    broker = app.broker
    waiting = next((step for step in status.steps if step.state == "pending"), None)
    if not isinstance(broker, ExchangeBroker) or waiting is None:
        return ""
    queues = broker.topology.consume_queues.get(waiting.actor, ())
    try:
        if not queues or any(broker.queue_consumers(queue) != 0 for queue in queues):
            return ""
    except BrokerUnavailable:
        return ""
    return (
        f" No worker reads queue {queues[0]} of step {waiting.node} ({waiting.actor}): start a worker "
        f"(`dramatiq {app.settings.app.actors}`), or add its queue to a worker's --queues."
    )
