"""What both brokers share: the protocol the runtime and middleware use, actor validation, the cached
topology, event messages, size limits and hook dispatch."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeGuard, cast

import dramatiq
from dramatiq.middleware import MiddlewareError, SkipMessage

from pipelines import options as opt
from pipelines.config.sections import BrokerConfig
from pipelines.dead_letters.reasons import DeadLetterPublisher
from pipelines.errors import DefinitionError, MessageTooLarge
from pipelines.handling.guards import (
    after_failed,
    before_failed,
    fails_open,
    guards_silently,
    middleware_name,
    observed_failure,
)
from pipelines.priority import refuse_broker_priority
from pipelines.profiles.kinds import profile_of
from pipelines.wire import naming
from pipelines.wire.routing import route_of
from pipelines.wire.topology import ActorRoute, Topology, build_topology


class PipelineBroker(DeadLetterPublisher, Protocol):
    """What the runtime and the middleware use of a broker, besides its being a Dramatiq broker."""

    namespace: str
    actors: dict[str, dramatiq.Actor[Any, Any]]

    @property
    def publish_count(self) -> int:
        """Publishes made so far (a fan-out is one)."""
        ...

    @property
    def confirm_waits(self) -> int:
        """Publisher-confirm waits so far (threads publishing together share one)."""
        ...

    @property
    def topology(self) -> Topology: ...

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]: ...

    def enqueue_many(
        self, messages: Sequence[dramatiq.Message[Any]], *, delay: int | None = None
    ) -> list[dramatiq.Message[Any]]: ...

    def publish_event(
        self, topic: str, payload: Any, *, options: dict[str, Any] | None = None
    ) -> dramatiq.Message[Any]: ...

    def prepare(self, message: dramatiq.Message[Any]) -> dramatiq.Message[Any]:
        """``message`` as it would be published (validated, versioned, sealed), not published: a step
        run where the step before it finished (``pipelines.flow.local_steps``)."""
        ...

    def get_actor(self, actor_name: str) -> dramatiq.Actor[Any, Any]: ...

    def acknowledge_early(self, message: dramatiq.broker.MessageProxy) -> None:
        """Settle a delivery now, before its actor ends (a long-running job owned by its lease)."""
        ...

    def close(self) -> None: ...


def pipeline_broker(broker: dramatiq.Broker) -> PipelineBroker:
    """``broker``, which a middleware hook received, as the broker this package's middleware work with.

    Raises:
        DefinitionError: It is a plain Dramatiq broker, not one built by ``pipelines.configure()``.
    """
    if not _is_pipeline_broker(broker):
        raise DefinitionError(
            f"The middleware of rabbit-pipelines need its broker, not a {type(broker).__name__}: build the "
            "broker with pipelines.configure() (or pipelines.app.build_app) instead of adding them to your own."
        )
    return broker


def _is_pipeline_broker(broker: dramatiq.Broker) -> TypeGuard[PipelineBroker]:
    # Both brokers, and only they, dispatch hooks through HookDispatch; each is checked against
    # PipelineBroker where the composition root hands it to the runtime. (A runtime-checkable
    # protocol would do the same in ~20 µs per call, on every step.)
    return isinstance(broker, HookDispatch)


def validate_actor(actor: dramatiq.Actor[Any, Any], *, namespace: str) -> None:
    """Refuse actor names and subscriptions that cannot be routed, before anything is declared.

    Raises:
        DefinitionError: Naming the actor and what to change.
    """
    if not naming.is_valid_actor_name(actor.actor_name):
        raise DefinitionError(
            f"Actor name {actor.actor_name!r} cannot be routed: use letters, digits, '_' or '-' and no dots "
            "(routing keys are dot-separated words)."
        )
    queue = naming.actor_queue(namespace, actor.queue_name, actor.actor_name)
    longest = max(naming.dead_letter_queue(queue), naming.partition_queue(queue, 1023), key=len)
    if len(longest.encode()) > naming.MAX_NAME_BYTES:
        raise DefinitionError(
            f"Actor {actor.actor_name!r} on queue {actor.queue_name!r} gives RabbitMQ queue names over "
            f"{naming.MAX_NAME_BYTES} bytes; shorten the actor, queue or namespace name."
        )
    refuse_broker_priority(actor.options, f"Actor {actor.actor_name!r}")
    patterns = actor.options.get(opt.SUBSCRIBE, ())
    if isinstance(patterns, str) or not all(isinstance(p, str) and naming.is_valid_topic_pattern(p) for p in patterns):
        raise DefinitionError(
            f"Actor {actor.actor_name!r}: subscribe={patterns!r} must be a list of topic patterns such as "
            "['order.*', 'invoice.#']."
        )


class TopologyCache:
    """The topology of a broker's actors, rebuilt only when an actor is added."""

    def __init__(self, *, namespace: str, config: BrokerConfig) -> None:
        self.namespace = namespace
        self.config = config
        self._built: tuple[int, Topology] | None = None

    def get(self, actors: Mapping[str, dramatiq.Actor[Any, Any]]) -> Topology:
        """The topology of ``actors``. Another thread may declare an actor meanwhile: the topology is
        built from one snapshot and remembered under that snapshot's size, never the size after it."""
        if self._built is not None and self._built[0] == len(actors):
            return self._built[1]
        declared = list(actors.values())
        topology = build_topology(
            self.namespace,
            (
                ActorRoute(
                    a.actor_name,
                    a.queue_name,
                    tuple(a.options.get(opt.SUBSCRIBE, ())),
                    profile_of(a),
                    int(a.options.get(opt.PARTITIONS, 1)),
                    a.options.get(opt.MAX_LENGTH) or self.config.max_queue_length or None,
                )
                for a in declared
            ),
            queue_type=self.config.queue_type,
            delivery_limit=self.config.delivery_limit,
            quorum_initial_group_size=self.config.quorum_initial_group_size,
            delay_tiers_ms=(round(s * 1000) for s in self.config.delay_tiers_s),
        )
        self._built = (len(declared), topology)
        return topology


def event_message(topic: str, payload: Any, options: dict[str, Any] | None = None) -> dramatiq.Message[Any]:
    """The message a domain event travels in: no actor yet, the topic in its options.

    Raises:
        DefinitionError: The topic is not dot-separated words.
    """
    if not naming.is_valid_topic(topic):
        raise DefinitionError(f"Topic {topic!r} is not dot-separated words such as 'order.placed'.")
    return dramatiq.Message(
        queue_name="",
        actor_name="",
        args=(payload,),
        kwargs={},
        options={**(options or {}), opt.EVENT_TOPIC: topic},
    )


def check_size(message: dramatiq.Message[Any], body: bytes, limit: int) -> None:
    """Raise MessageTooLarge when ``body`` is over ``limit`` bytes, with advice."""
    if len(body) > limit:
        raise MessageTooLarge(
            f"A message for {message.actor_name or route_of(message).routing_key!r} is {len(body)} bytes, over "
            f"broker.max_message_bytes = {limit}. Pass ids, not objects, and keep large data in a database "
            "or object store."
        )


class HookDispatch:
    """Calls only the middleware that implement a hook, in Dramatiq's order and with its error rules.

    Dramatiq's ``Broker.emit_before``/``emit_after`` look up the hook on every middleware for every
    message, most of them inherited no-ops. This mixin keeps, per hook, the list of middleware that
    override it (rebuilt when middleware are added), which is most of a no-op message's hook cost.
    """

    middleware: list[dramatiq.Middleware]
    logger: Any

    def _hooks(self, name: str) -> list[Callable[..., None]]:
        cache: dict[str, list[Callable[..., None]]] = self.__dict__.setdefault("_hook_cache", {})
        hooks = cache.get(name)
        if hooks is None:
            base = getattr(dramatiq.Middleware, name)
            hooks = [getattr(m, name) for m in self.middleware if getattr(type(m), name) is not base]
            cache[name] = hooks
        return hooks

    def emit_before(self, signal: str, *args: Any, **kwargs: Any) -> None:
        """Dramatiq's rules, except that a guard failing before a message is processed stops it there
        (:mod:`pipelines.handling.guards`): only observability fails open."""
        for hook in self._hooks("before_" + signal):
            try:
                hook(self, *args, **kwargs)
            except MiddlewareError:
                raise
            except Exception as e:
                if signal == "process_message" and fails_open(hook):
                    self._observed(hook, "before_" + signal, e)
                    continue
                if signal != "process_message":
                    self.logger.critical("Unexpected failure in before_%s of %r.", signal, hook, exc_info=True)
                    continue
                before_failed(cast(dramatiq.Broker, self), args[0], hook, e)
                raise SkipMessage from None

    def emit_after(self, signal: str, *args: Any, **kwargs: Any) -> None:
        for hook in reversed(self._hooks("after_" + signal)):
            try:
                hook(self, *args, **kwargs)
            except Exception as e:
                if signal == "process_message" and not fails_open(hook):
                    after_failed(args[0], hook, e)
                elif signal == "process_message":
                    self._observed(hook, "after_" + signal, e)
                else:
                    self.logger.critical("Unexpected failure in after_%s of %r.", signal, hook, exc_info=True)

    def _observed(self, hook: Any, name: str, error: Exception) -> None:
        """An observational hook failed: logged, and counted by any middleware that counts failures."""
        observed_failure(hook, name, error)
        for middleware in self.middleware:
            count = getattr(middleware, "middleware_failed", None)
            if count is not None:
                count(middleware_name(hook), name)

    def add_middleware(self, middleware: dramatiq.Middleware, **kwargs: Any) -> None:
        if guards_silently(middleware):
            self.logger.info(
                "Middleware %s guards every message: if one of its hooks raises, the message is dead-lettered. "
                "Mark it @pipelines.observational if it only observes (its errors are then logged and counted).",
                type(middleware).__name__,
            )
        self.__dict__.pop("_hook_cache", None)
        super().add_middleware(middleware, **kwargs)  # type: ignore[misc]
