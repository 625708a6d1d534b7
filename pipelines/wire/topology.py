"""What a namespace declares in RabbitMQ, as plain data.

Per namespace: a topic exchange for actor and pipeline traffic (``<ns>.work``), a topic exchange for
domain events (``<ns>.events``), a direct dead-letter exchange (``<ns>.dead``) and a headers exchange
for delays (``<ns>.delay``). Per actor: its queue, bound to the work exchange by its name and to the
events exchange by its subscriptions, and the queue's dead-letter queue. The actor's profile (see
``pipelines.profiles``) shapes its queues: a fire-and-forget actor gets a classic queue, an ordered
actor one queue per partition (single active consumer, bound by ``<actor>.~<partition>``). Per delay tier: a queue whose
messages expire after the tier's delay and dead-letter back to the work exchange with their routing
key. The RabbitMQ broker declares exactly this; the memory broker routes by the same bindings;
``pipelines topology`` prints it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pipelines.wire import naming

#: Header that selects a delay tier on the delay exchange.
DELAY_TIER_HEADER = "delay-tier-ms"


@dataclass(frozen=True, slots=True)
class Exchange:
    name: str
    type: Literal["topic", "direct", "headers"]


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    arguments: Mapping[str, Any]
    role: Literal["actor", "dead-letter", "delay"]


@dataclass(frozen=True, slots=True)
class Binding:
    exchange: str
    queue: str
    routing_key: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ActorRoute:
    """What the topology needs to know about an actor."""

    actor_name: str
    queue_name: str
    subscribe: tuple[str, ...] = ()
    profile: str = "guaranteed"
    partitions: int = 1
    max_length: int | None = None
    """Most messages the queue (each partition) holds; publishes beyond are refused."""


@dataclass(frozen=True)
class Topology:
    namespace: str
    exchanges: tuple[Exchange, ...]
    queues: tuple[Queue, ...]
    bindings: tuple[Binding, ...]
    actor_queues: Mapping[str, str]
    """actor name → its RabbitMQ queue (for an ordered actor: the name its partitions and its
    dead-letter queue are named after)."""
    delay_tiers_ms: tuple[int, ...]
    consume_queues: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """actor name → the queues its messages arrive on (an ordered actor's partitions)."""
    routes: tuple[ActorRoute, ...] = ()
    actor_profiles: Mapping[str, str] = field(default_factory=dict)
    """actor name → its profile."""

    @property
    def work_exchange(self) -> str:
        return naming.work_exchange(self.namespace)

    @property
    def events_exchange(self) -> str:
        return naming.events_exchange(self.namespace)

    @property
    def delay_exchange(self) -> str:
        return naming.delay_exchange(self.namespace)

    def delay_tier_for(self, remaining_ms: int) -> int:
        """The tier to wait in next: never early, late by at most the shortest tier, few hops.

        A tier that overshoots ``remaining_ms`` by no more than the shortest tier ends the wait in one
        hop; otherwise the longest tier that does not overshoot brings the message closer.
        """
        shortest = self.delay_tiers_ms[0]
        closing = [tier for tier in self.delay_tiers_ms if remaining_ms <= tier <= remaining_ms + shortest]
        if closing:
            return closing[0]
        fitting = [tier for tier in self.delay_tiers_ms if tier <= remaining_ms]
        return fitting[-1] if fitting else shortest


def build_topology(
    namespace: str,
    actors: Iterable[ActorRoute],
    *,
    queue_type: Literal["quorum", "classic"],
    delivery_limit: int,
    delay_tiers_ms: Iterable[int],
    quorum_initial_group_size: int | None = None,
) -> Topology:
    """Every exchange, queue and binding of ``namespace`` for these actors.

    ``quorum_initial_group_size`` is given to every quorum queue only when set: RabbitMQ refuses to
    declare an existing queue with other arguments, so a deployment that never set it is unchanged.
    """
    work = naming.work_exchange(namespace)
    events = naming.events_exchange(namespace)
    dead = naming.dead_letter_exchange(namespace)
    delay = naming.delay_exchange(namespace)
    exchanges = (
        Exchange(work, "topic"),
        Exchange(events, "topic"),
        Exchange(dead, "direct"),
        Exchange(delay, "headers"),
    )
    queues: list[Queue] = []
    bindings: list[Binding] = []
    actor_queues: dict[str, str] = {}
    consume_queues: dict[str, tuple[str, ...]] = {}
    routes = tuple(sorted(actors, key=lambda a: a.actor_name))
    for actor in routes:
        queue = naming.actor_queue(namespace, actor.queue_name, actor.actor_name)
        dead_queue = naming.dead_letter_queue(queue)
        actor_queues[actor.actor_name] = queue
        arguments: dict[str, Any] = {"x-dead-letter-exchange": dead, "x-dead-letter-routing-key": queue}
        if actor.max_length:
            # A full queue refuses (nacks) new publishes: the producer hears of it, nothing is dropped.
            arguments |= {"x-max-length": actor.max_length, "x-overflow": "reject-publish"}
        if actor.profile == "ordered":
            # One queue per partition, each served by one consumer at a time: its messages in order.
            partitioned = {**arguments, "x-single-active-consumer": True}
            names = tuple(naming.partition_queue(queue, p) for p in range(actor.partitions))
            for partition, name in enumerate(names):
                queues.append(Queue(name, _with_type(partitioned, "quorum", delivery_limit), "actor"))
                bindings.append(Binding(work, name, naming.partition_routing_key(actor.actor_name, partition)))
            consume_queues[actor.actor_name] = names
        else:
            # Fire-and-forget trades durability for speed: classic queue, transient messages.
            kind: Literal["quorum", "classic"] = "classic" if actor.profile == "fire_and_forget" else queue_type
            queues.append(Queue(queue, _with_type(arguments, kind, delivery_limit), "actor"))
            bindings.append(Binding(work, queue, naming.actor_binding_key(actor.actor_name)))
            bindings.extend(Binding(events, queue, pattern) for pattern in actor.subscribe)
            consume_queues[actor.actor_name] = (queue,)
        queues.append(Queue(dead_queue, _with_type({}, queue_type, None), "dead-letter"))
        bindings.append(Binding(dead, dead_queue, queue))
    tiers = tuple(sorted(set(delay_tiers_ms)))
    for tier in tiers:
        name = naming.delay_queue(namespace, tier)
        tier_arguments: dict[str, Any] = {"x-message-ttl": tier, "x-dead-letter-exchange": work}
        queues.append(Queue(name, _with_type(tier_arguments, queue_type, None), "delay"))
        bindings.append(Binding(delay, name, "", {"x-match": "all", DELAY_TIER_HEADER: tier}))
    if quorum_initial_group_size is not None:
        replicas = {"x-quorum-initial-group-size": quorum_initial_group_size}
        queues = [
            replace(q, arguments={**q.arguments, **replicas}) if q.arguments.get("x-queue-type") == "quorum" else q
            for q in queues
        ]
    return Topology(
        namespace,
        exchanges,
        tuple(queues),
        tuple(bindings),
        actor_queues,
        tiers,
        consume_queues,
        routes,
        {route.actor_name: route.profile for route in routes},
    )


def _with_type(
    arguments: Mapping[str, Any], queue_type: Literal["quorum", "classic"], delivery_limit: int | None
) -> dict[str, Any]:
    result: dict[str, Any] = {"x-queue-type": queue_type, **arguments}
    if queue_type == "quorum" and "x-dead-letter-exchange" in arguments:
        # Confirmed dead-lettering, so a message moving to its dead-letter (or back from a delay) is not lost.
        result |= {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
    if queue_type == "quorum" and delivery_limit is not None:
        result["x-delivery-limit"] = delivery_limit
    return result
