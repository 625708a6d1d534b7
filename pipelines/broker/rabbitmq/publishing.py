"""Publishing batches under one confirm wait, and what to do when RabbitMQ does not take them.

A batch whose connection broke, or that RabbitMQ did not confirm in time, is resent, minus what
RabbitMQ had confirmed, on a fresh connection (at most ``MAX_PUBLISH_ATTEMPTS`` connections; on a
cluster each tries every node, so a batch sent to a node that died or was cut off goes to a live one).
A message is reported published only once confirmed: one sent twice (confirmed the second time, after
the first went through unconfirmed) is absorbed by the step claims and idempotency keys. Messages
RabbitMQ nacked are sent again the same way, after a pause, for up to ``REFUSED_RETRY_S``, unless a
full queue refused them (a refused publish names the full queue when a max length is why). Messages
RabbitMQ returned as unroutable are resent once after declaring the topology again (a queue may have
been deleted under a running producer); returned again, they are Unroutable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from pipelines.broker.rabbitmq.confirms import BatchInterrupted, Outgoing, Refused
from pipelines.broker.rabbitmq.connections import Connections
from pipelines.broker.rabbitmq.declaring import Declarer
from pipelines.errors import BrokerUnavailable, PublishError, QueueFull, Unroutable
from pipelines.store.group_commit import GroupCommit
from pipelines.wire.routing import topic_matches
from pipelines.wire.topology import Topology

logger = logging.getLogger(__name__)

#: How many connections a batch is tried on before BrokerUnavailable.
MAX_PUBLISH_ATTEMPTS = 3
#: How long messages RabbitMQ nacks (without a full queue) are sent again, pausing between tries from
#: the first pause, doubled each time up to the longest: longer than a quorum queue's leader election.
REFUSED_RETRY_S = 15.0
REFUSED_FIRST_PAUSE_S = 0.1
REFUSED_MAX_PAUSE_S = 2.0


class Publishing:
    """Publishes batches for one broker (see the module docstring)."""

    def __init__(self, *, connections: Connections, declarer: Declarer, topology: Callable[[], Topology]) -> None:
        self.connections = connections
        self.declarer = declarer
        self.topology = topology
        self.count = 0
        """Publishes made so far (a fan-out is one)."""
        self.confirm_waits = 0
        """Times a batch was written and its confirms awaited (threads publishing together share one)."""
        self._together: GroupCommit[list[Outgoing], list[Outgoing]] = GroupCommit(self._publish_together)

    def publish(self, batch: list[Outgoing]) -> None:
        """Publish ``batch`` and wait for RabbitMQ's confirms (see the module docstring).

        Batches that threads publish at the same time share a connection and a confirm wait (group
        commit); what that shared attempt did not settle, each thread publishes alone.

        Raises:
            Unroutable: No queue is bound for a message's routing key, even after declaring again.
            QueueFull: A queue at its max length refused a message (other refusals, still refused
                after ``REFUSED_RETRY_S``: PublishError).
            BrokerUnavailable: RabbitMQ did not answer after ``MAX_PUBLISH_ATTEMPTS`` connections.
        """
        leftover = self._together.submit(batch)
        remaining = leftover if isinstance(leftover, list) else batch  # NOT_DONE: all of it
        if remaining:
            self._publish_alone(remaining)

    def _publish_together(self, batches: Sequence[list[Outgoing]]) -> list[list[Outgoing]]:
        """One attempt at publishing several threads' batches as one; returns, for each batch, what it
        did not settle (refused, returned, unconfirmed when the connection broke, or all of it when no
        connection opened): its thread publishes that alone, with every retry and error of its own."""
        flat = [item for batch in batches for item in batch]
        try:
            returned = set(self._send(flat))
            settled = {id(item) for item in flat if item.message_id not in returned}
        except Refused as e:
            self.connections.drop()
            unsettled = {id(item) for item in e.items + e.returned}
            settled = {id(item) for item in flat if id(item) not in unsettled}
        except BatchInterrupted as e:
            self.connections.drop()
            settled = {id(flat[index]) for index in e.confirmed}
        except BrokerUnavailable:
            settled = set()
        self.count += len(settled)
        return [[item for item in batch if id(item) not in settled] for batch in batches]

    def _publish_alone(self, batch: list[Outgoing]) -> None:
        remaining = batch
        redeclared = False
        attempt = 0
        refused_until: float | None = None
        pause_s = REFUSED_FIRST_PAUSE_S
        while True:
            attempt += 1
            try:
                returned = self._send(remaining)
            except Refused as e:
                refusal = self._refusal(e)
                refused_until = refused_until or time.monotonic() + REFUSED_RETRY_S
                if isinstance(refusal, QueueFull) or time.monotonic() + pause_s > refused_until:
                    raise refusal from None
                # A nack without a full queue: a quorum queue without a leader for a moment (its node
                # was lost and the others are electing one). Later, on a new connection, it takes them.
                self.connections.drop()
                self.count += len(remaining) - len(e.items) - len(e.returned)
                remaining = e.items + e.returned
                logger.warning("RabbitMQ refused %d message(s); retrying them in %.1f s.", len(remaining), pause_s)
                time.sleep(pause_s)
                pause_s = min(2 * pause_s, REFUSED_MAX_PAUSE_S)
                attempt -= 1  # a refusal is not a connection that failed
                continue
            except BatchInterrupted as e:
                self.connections.drop()
                remaining = [item for i, item in enumerate(remaining) if i not in e.confirmed]
                if attempt >= MAX_PUBLISH_ATTEMPTS:
                    raise self.connections.unavailable(e.cause) from None
                logger.warning("Publish interrupted (%s); retrying %d message(s).", e.cause, len(remaining))
                continue
            self.count += len(remaining)
            if not returned:
                return
            remaining = [item for item in remaining if item.message_id in returned]
            if redeclared or attempt >= MAX_PUBLISH_ATTEMPTS:
                keys = sorted({item.routing_key for item in remaining})
                raise Unroutable(
                    f"No queue in namespace {self.declarer.namespace!r} is bound for {', '.join(keys)}: no declared "
                    "actor has that name, or no actor subscribes to that topic."
                )
            self.declarer.forget()
            self.declarer.ensure(self.topology())
            redeclared = True

    def _send(self, batch: list[Outgoing]) -> list[str]:
        """One attempt on this thread's connection (see ``ConfirmPublisher.publish``), counted."""
        if self.connections.config.confirm_delivery and any(item.confirm for item in batch):
            self.confirm_waits += 1
        return self.connections.publisher().publish(batch)

    def _refusal(self, refused: Refused) -> PublishError:
        """QueueFull naming the full queue a refused publish was bound for, else the refusal itself."""
        topology = self.topology()
        limits = {q.name: q.arguments["x-max-length"] for q in topology.queues if "x-max-length" in q.arguments}
        for item in refused.items:
            bound = {
                b.queue
                for b in topology.bindings
                if b.exchange == item.exchange and b.queue in limits and topic_matches(b.routing_key, item.routing_key)
            }
            for queue in sorted(bound):
                depth = self.declarer.depth(queue) or 0
                if depth >= limits[queue]:
                    return QueueFull(
                        f"Queue {queue} is full ({depth} messages, max_length {limits[queue]}): RabbitMQ refused "
                        f"message {item.message_id}. Add workers, slow the producer down, or raise max_length "
                        "(the actor's option, or [broker] max_queue_length).",
                        queue=queue,
                        depth=depth,
                    )
        return refused
