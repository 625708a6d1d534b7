"""The composition root: the broker, its middleware, the run store and the runtime, built from config.

Nothing else in the core builds a broker. ``configure()`` builds the app once per process and makes
its broker Dramatiq's broker, which is how actors declared with ``@dramatiq.actor`` and the stock
``dramatiq`` and ``periodiq`` CLIs find it.
"""

from __future__ import annotations

import importlib
import inspect
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dramatiq
from dramatiq.common import current_millis
from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, ShutdownNotifications
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from periodiq import CronSpec, PeriodiqMiddleware

from pipelines import options as opt
from pipelines import telemetry
from pipelines.aio import AsyncBridge
from pipelines.broker import ExchangeBroker, MemoryBroker, make_broker
from pipelines.composition import Ending, Node, R, as_node
from pipelines.config import Settings, load_settings
from pipelines.current import current_app, get_app, set_app
from pipelines.dlq import DeadLetterQueues
from pipelines.errors import ConfigError, DefinitionError, UnknownPipeline
from pipelines.middleware import (
    ActorTimeLimit,
    Backoff,
    CorrelationId,
    DeadLetter,
    Idempotency,
    Leases,
    Metrics,
    Payloads,
    PipelineSteps,
    Profiles,
    RateLimits,
    Schedules,
    Timeout,
    Tracing,
)
from pipelines.middleware.backoff import import_exceptions
from pipelines.outbound import Outbound
from pipelines.profiles import MissedPolicy
from pipelines.rate_limits import Rate, RateLimiter, parse_rate, pipeline_key, slot_grace_ms
from pipelines.runs import Run
from pipelines.runtime import Runtime
from pipelines.schedules import SCHEDULE_SKIP_DELAY_S, pipeline_starter
from pipelines.sealing import Sealer
from pipelines.store import RunStore, make_store

__all__ = ["App", "build_app", "build_middleware", "configure", "current_app"]

#: Longest the framework's own actors (lease watchdog, schedule check) may run, in seconds.
SYSTEM_ACTOR_TIMEOUT_S = 60.0


def build_middleware(
    settings: Settings, runtime: Runtime, store: RunStore, *, tracer: trace.Tracer | None = None
) -> list[dramatiq.Middleware]:
    """The middleware of every broker, in order.

    ``before_*`` hooks run top to bottom, ``after_*`` hooks bottom to top, so:

    - ``Profiles`` is first: it checks an actor's profile and fills in its defaults when the actor is
      declared, before the other middleware read them (it has no message hooks).
    - ``CorrelationId`` is first: its context is set before any other hook logs, and cleared last.
    - ``Tracing`` (with ``[telemetry] enabled``) comes next: its span covers everything below, and
      every publish made while a message is processed is a child of that message's span.
    - ``Metrics`` (with ``[metrics] enabled``) comes next, so its ``after_*`` hooks run after the
      others have decided (failed, retried, skipped as a duplicate) and it counts what they decided.
    - ``Timeout`` comes before ``ActorTimeLimit`` (Dramatiq's ``TimeLimit``), which enforces the limit
      it sets.
    - ``ActorTimeLimit`` is last: it arms the limit when the actor's function starts and disarms it
      when the function returns, so it interrupts only the actor, never a claim, the record of a step
      that finished or the worker's own failure handling (a limit that fired there after a stall made
      a step that had done its work run again, or killed the worker thread holding its message).
    - ``Payloads`` opens sealed arguments and validates typed payloads before anything reads them
      (idempotency keys are computed from what the actor will get).
    - ``RateLimits`` takes a rate-limit slot before ``Idempotency`` and ``PipelineSteps`` claim
      anything: a message it puts off until its slot has claimed nothing that would hold it up later.
    - ``Idempotency`` and ``PipelineSteps`` decide whether a message runs at all; both come before
      ``Backoff``, so after a failure they see whether ``Backoff`` gave up (the run fails, the key is
      released) or scheduled another attempt.
    - ``Leases`` comes after both: a long-running job is acknowledged and leased only once it is sure
      to run, and its lease is closed after ``Backoff`` decided on a retry.
    - ``DeadLetter`` only acts just before a rejection, which comes after every other hook.
    - ``Schedules`` comes after periodiq's middleware, which skips ticks that arrive too late: only a
      tick that will run is claimed.

    Dramatiq's ``Callbacks`` and ``Pipelines`` stay, so its ``pipeline()`` and ``on_success``/
    ``on_failure`` keep working; ``Backoff`` replaces its ``Retries`` (same actor options).
    """
    observing: list[dramatiq.Middleware] = []
    # The framework's own actors (lease watchdog, schedule check, deadline check) are quick: a short time limit.
    system_timeout_s = min(SYSTEM_ACTOR_TIMEOUT_S, settings.broker.consumer_timeout_s)
    schedules = Schedules(store=store, grace_s=settings.profiles.scheduled_grace_s, system_timeout_s=system_timeout_s)
    if tracer is not None:
        observing.append(Tracing(tracer=tracer, namespace=settings.namespace))
    if settings.metrics.enabled:
        metrics = Metrics(config=settings.metrics, namespace=settings.namespace, serve=serve_metrics)
        runtime.listeners.append(metrics)
        schedules.listeners.append(metrics.ticks_missed)
        observing.append(metrics)
    return [
        Profiles(config=settings.profiles),
        CorrelationId(logging=settings.logging),
        *observing,
        AgeLimit(),
        Timeout(default_s=settings.worker.time_limit_s, consumer_timeout_s=settings.broker.consumer_timeout_s),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Payloads(sealer=runtime.sealer),
        RateLimits(limiter=RateLimiter(store), grace_ms=slot_grace_ms(settings.broker.delay_tiers_s[0])),
        Idempotency(
            store=store,
            lease_s=settings.store.step_lease_s,
            retention_s=settings.store.idempotency_retention_s,
        ),
        PipelineSteps(runtime=runtime, store=store, system_timeout_s=system_timeout_s),
        Leases(
            runtime=runtime,
            store=store,
            default_max_retries=settings.retries.max_retries,
            system_timeout_s=system_timeout_s,
        ),
        Backoff(
            max_retries=settings.retries.max_retries,
            min_backoff_ms=int(settings.retries.min_backoff_s * 1000),
            max_backoff_ms=int(settings.retries.max_backoff_s * 1000),
            permanent=import_exceptions(settings.retries.permanent_errors),
        ),
        DeadLetter(),
        PeriodiqMiddleware(skip_delay=SCHEDULE_SKIP_DELAY_S),
        schedules,
        ActorTimeLimit(time_limit=int(settings.worker.time_limit_s * 1000)),
    ]


@dataclass
class App:
    """One configured rabbit-pipelines application: start runs, follow them, publish events."""

    settings: Settings
    broker: ExchangeBroker | MemoryBroker
    store: RunStore
    runtime: Runtime
    pipelines: dict[str, Node | Callable[..., Node]] = field(default_factory=dict)
    tracer_provider: TracerProvider | None = None
    rate_limits: dict[str, Rate] = field(default_factory=dict)
    _bridge: AsyncBridge | None = field(default=None, init=False, repr=False)
    _bridge_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def register(self, name: str, pipeline: object, *, rate_limit: str | None = None) -> None:
        """Register a pipeline (or a factory that builds one from the run's arguments) under ``name``.

        ``run(name)`` and ``pipelines run NAME`` then start it; with ``rate_limit`` ("10/s", "100/m"),
        at most that many runs start, evenly spaced (a run over the rate starts later, never refused).
        """
        self.pipelines[name] = pipeline if callable(pipeline) and not isinstance(pipeline, Node) else as_node(pipeline)
        if rate_limit is not None:
            self.rate_limits[name] = parse_rate(rate_limit, owner=f"Pipeline {name!r}")

    def start(
        self,
        node: Ending[R],
        *,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        deadline_s: float | None = None,
    ) -> Run[R]:
        """Start a run of a pipeline built on the spot (see ``Node.run_with_options``).

        The run's result is typed as the pipeline's last step returns (``Run[R]``).
        """
        delay_ms = first_options = None
        if name in self.rate_limits:
            # Paced here, and held by the worker (the run's first steps carry the limit and their slot).
            rate = self.rate_limits[name]
            delay_ms = RateLimiter(self.store).delays_ms(pipeline_key(name), rate, 1)[0] or None
            first_options = {opt.PIPELINE_RATE_LIMIT: rate.text, opt.RATE_SLOT: current_millis() + (delay_ms or 0)}
        run_id, created = self.runtime.start(
            self.broker,
            as_node(node),
            args=args,
            kwargs=kwargs,
            name=name,
            idempotency_key=idempotency_key,
            deadline_s=deadline_s,
            delay_ms=delay_ms,
            first_options=first_options,
        )
        return Run(run_id, store=self.store, created=created, sealer=self.runtime.sealer, bridge=self.aio)

    def start_many(
        self,
        nodes: Iterable[object],
        *,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> list[Run]:
        """Start one run per pipeline with one store round trip and one confirmed publish for all."""
        runs = [(as_node(node), args, kwargs) for node in nodes]
        started = self.runtime.start_many(self.broker, runs, name=name)
        return [
            Run(run_id, store=self.store, created=created, sealer=self.runtime.sealer, bridge=self.aio)
            for run_id, created in started
        ]

    def run(
        self, name: str, *args: Any, idempotency_key: str | None = None, deadline_s: float | None = None, **kwargs: Any
    ) -> Run:
        """Start the pipeline registered as ``name``.

        Raises:
            UnknownPipeline: Nothing is registered under ``name``.
        """
        try:
            entry = self.pipelines[name]
        except KeyError:
            known = ", ".join(sorted(self.pipelines)) or "none"
            raise UnknownPipeline(f"No pipeline is registered as {name!r} (registered: {known}).") from None
        if isinstance(entry, Node):
            return self.start(
                entry, args=args, kwargs=kwargs, idempotency_key=idempotency_key, name=name, deadline_s=deadline_s
            )
        try:
            inspect.signature(entry).bind(*args, **kwargs)
        except TypeError as e:
            raise DefinitionError(f"Arguments do not fit pipeline {name!r}: {e}.") from None
        return self.start(entry(*args, **kwargs), idempotency_key=idempotency_key, name=name, deadline_s=deadline_s)

    def schedule(
        self, name: str, spec: CronSpec, *args: Any, missed: MissedPolicy = "skip", **kwargs: Any
    ) -> dramatiq.Actor[Any, Any]:
        """Start the pipeline registered as ``name`` on every tick of ``spec`` (``periodiq.cron(...)``).

        Declares a scheduled actor ``schedule_<name>`` for the ``periodiq`` scheduler; each tick starts
        one run (keyed by the tick, so two schedulers start it once), with ``args``/``kwargs``. Declare
        it where the actors are declared, so the scheduler and the workers both see it.
        """
        actor_name = "schedule_" + re.sub(r"[^A-Za-z0-9_-]", "_", name)
        starter = pipeline_starter(self.run, name, args, kwargs)
        declare = dramatiq.actor(broker=self.broker, actor_name=actor_name, periodic=spec, missed=missed)
        return declare(starter)

    def run_for_key(self, idempotency_key: str) -> Run | None:
        """The run an idempotency key started, if it is still retained."""
        run_id = self.store.run_for_key(idempotency_key)
        return (
            Run(run_id, store=self.store, created=False, sealer=self.runtime.sealer, bridge=self.aio)
            if run_id
            else None
        )

    @property
    def dead_letters(self) -> DeadLetterQueues:
        """List, show, replay and purge this namespace's dead letters."""
        return DeadLetterQueues(broker=self.broker, store=self.store, retention_s=self.settings.store.retention_s)

    def get_run(self, run_id: str) -> Run:
        """The handle of an existing run (``status()`` raises RunNotFound if there is none)."""
        return Run(run_id, store=self.store, sealer=self.runtime.sealer, bridge=self.aio)

    def publish(self, topic: str, payload: Any) -> str:
        """Publish a domain event to every actor subscribed to a matching pattern; returns its id."""
        return self.broker.publish_event(topic, payload).message_id

    def aio(self) -> AsyncBridge:
        """The app's asyncio side (made on first use): what the ``*_async`` methods run on."""
        with self._bridge_lock:
            if self._bridge is None:
                self._bridge = AsyncBridge(self.store)
            return self._bridge

    async def start_async(
        self,
        node: Ending[R],
        *,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        deadline_s: float | None = None,
    ) -> Run[R]:
        """:meth:`start` for asyncio code: the event loop runs on while the run is stored and published."""
        return await self.aio().call(
            self.start,
            node,
            args=args,
            kwargs=kwargs,
            idempotency_key=idempotency_key,
            name=name,
            deadline_s=deadline_s,
        )

    async def run_async(
        self, name: str, *args: Any, idempotency_key: str | None = None, deadline_s: float | None = None, **kwargs: Any
    ) -> Run:
        """:meth:`run` for asyncio code."""
        return await self.aio().call(
            self.run, name, *args, idempotency_key=idempotency_key, deadline_s=deadline_s, **kwargs
        )

    async def publish_async(self, topic: str, payload: Any) -> str:
        """:meth:`publish` for asyncio code."""
        return await self.aio().call(self.publish, topic, payload)

    def load_modules(self) -> None:
        """Import the actors and the registered pipelines named in the ``[app]`` config section.

        Raises:
            ConfigError: A module or attribute named there does not exist.
        """
        _import(self.settings.app.actors, "app.actors")
        if self.settings.app.pipelines is None:
            return  # the actors module registers its pipelines itself (app.register)
        registry = _import(self.settings.app.pipelines, "app.pipelines")
        if not isinstance(registry, Mapping):
            raise ConfigError(f"app.pipelines = {self.settings.app.pipelines!r} is not a mapping of name to pipeline.")
        for name, node in registry.items():
            self.register(name, node)

    def close(self) -> None:
        if self._bridge is not None:
            self._bridge.close()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()  # exports what the batch processor still holds
        self.broker.close()
        self.store.close()


def _import(path: str, key: str) -> Any:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{key} = {path!r}: cannot import {module_name!r} ({e}).") from None
    if not attribute:
        return module
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(f"{key} = {path!r}: module {module_name!r} has no {attribute!r}.") from None


def build_app(settings: Settings, *, span_exporter: SpanExporter | None = None) -> App:
    """A new app from ``settings``; nothing connects until the first publish, consume or store call.

    ``span_exporter`` replaces the OTLP exporter (tests use the SDK's in-memory one).
    """
    store = make_store(settings.store, namespace=settings.namespace)
    provider = tracer = None
    if settings.telemetry.enabled:
        provider = telemetry.make_tracer_provider(settings.telemetry, exporter=span_exporter)
        tracer = telemetry.install(provider)
    sealer = Sealer(settings.encryption.keys) if settings.encryption.keys else None
    runtime = Runtime(
        store=store,
        lease_s=settings.store.step_lease_s,
        max_result_bytes=settings.store.max_result_bytes,
        tracer=tracer,
        sealer=sealer,
    )
    middleware = build_middleware(settings, runtime, store, tracer=tracer)
    outbound = Outbound(
        sealer=sealer,
        limiter=RateLimiter(store),
        warn_bytes=settings.broker.warn_message_bytes,
        large_policy=settings.broker.large_message_policy,
    )
    broker = make_broker(
        settings.broker, namespace=settings.namespace, outbound=outbound, middleware=middleware, marks=store
    )
    return App(settings=settings, broker=broker, store=store, runtime=runtime, tracer_provider=provider)


def serve_metrics() -> int:
    """The `dramatiq` CLI's metrics process (see ``pipelines.exposition``); runs until stopped."""
    from pipelines.exposition import serve

    return serve()


def configure(settings: Settings | None = None) -> App:
    """The process's app: built from ``settings`` (or ``config.toml``) on the first call, then reused.

    Its broker becomes Dramatiq's global broker, so ``@dramatiq.actor`` declares actors on it.

    Raises:
        ConfigError: The configuration is invalid, or a different one was configured already.
    """
    with _lock:
        existing = get_app()
        if existing is not None:
            if settings is not None and settings != existing.settings:
                raise ConfigError("pipelines.configure() was already called with a different configuration.")
            return existing
        app = build_app(settings or load_settings())
        dramatiq.set_broker(app.broker)
        set_app(app)
        return app


_lock = threading.Lock()
