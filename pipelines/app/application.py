"""The application object: start runs and follow them, publish events, find and re-run runs, its asyncio
side; built by ``build_app``."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dramatiq
from opentelemetry.sdk.trace import TracerProvider
from periodiq import CronSpec

from pipelines.aio import AsyncBridge
from pipelines.broker import ExchangeBroker, MemoryBroker
from pipelines.composition import Ending, Node, R, as_node
from pipelines.config.modules import load_app_modules
from pipelines.config.settings import Settings
from pipelines.dead_letters.queues import DeadLetterQueues
from pipelines.errors import ConfigError
from pipelines.flow.registered import built, linked, rerun_input, unknown_pipeline
from pipelines.flow.run_query import Time, check_limit, run_query
from pipelines.flow.runtime import Runtime
from pipelines.flow.starting import Origin
from pipelines.flow.step_messages import StepInput
from pipelines.profiles.kinds import MissedPolicy
from pipelines.rate_limits.limiter import RateLimiter
from pipelines.runs import Run
from pipelines.schedules.ticks import pipeline_starter
from pipelines.store import RunStore
from pipelines.store.base import RunPage
from pipelines.wire.rates import Rate, parse_rate

__all__ = ["App"]


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
    _modules_loaded: bool = field(default=False, init=False, repr=False, compare=False)
    # Re-entrant: the actors module being imported may configure the app and look a pipeline up.
    _loading: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False, compare=False)

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
        on_created: Callable[[str, bool], None] | None = None,
        origin: Origin | None = None,
        connection: Any = None,
    ) -> Run[R]:
        """Start a run of a pipeline built on the spot (see ``Node.run_with_options``).

        The run's result is typed as the pipeline's last step returns (``Run[R]``). Without ``name``
        the run is named after its first and last actors (``charge>...>notify``). ``on_created(run id,
        created)`` is called as soon as the run is recorded, before its first steps are published; a
        start that fails or is interrupted (Ctrl-C) after that marks the run failed with the reason.
        ``origin`` is how the run was asked for, kept with it
        ([`start_registered`][pipelines.app.App.start_registered] passes it).

        With ``connection`` (a psycopg connection to the PostgreSQL run store's database), the run is
        written in that connection's transaction: it starts when the caller commits (a worker relays its
        first messages), and a rollback leaves no run.
        """
        delay_ms, first_options = None, None
        if name in self.rate_limits:  # paced here, and held by the worker
            delay_ms, first_options = RateLimiter(self.store).run_pacing(name, self.rate_limits[name])
        if connection is not None:
            [(run_id, created)] = self.runtime.start_in(
                connection,
                self.broker,
                [(as_node(node), args, kwargs)],
                name=name,
                idempotency_key=idempotency_key,
                deadline_s=deadline_s,
                origin=origin,
                delay_ms=delay_ms,
                first_options=first_options,
            )
            return self._handle(run_id, created)
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
            on_created=on_created,
            origin=origin,
        )
        return self._handle(run_id, created)

    def _handle(self, run_id: str, created: bool = True) -> Run:
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
        return [self._handle(run_id, created) for run_id, created in started]

    def run(
        self, name: str, *args: Any, idempotency_key: str | None = None, deadline_s: float | None = None, **kwargs: Any
    ) -> Run:
        """Start the pipeline registered as ``name``.

        Raises:
            UnknownPipeline: Nothing is registered under ``name``.
        """
        return self.start_registered(
            name, args=args, kwargs=kwargs, idempotency_key=idempotency_key, deadline_s=deadline_s
        )

    def start_registered(
        self,
        name: str,
        *,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
        on_created: Callable[[str, bool], None] | None = None,
        rerun_of: str | None = None,
    ) -> Run:
        """[`run`][pipelines.app.App.run] with its arguments as values, and ``on_created`` as for
        [`start`][pipelines.app.App.start]; ``rerun_of`` names the run this one re-runs (see
        [`rerun`][pipelines.app.App.rerun]).

        Raises:
            UnknownPipeline: Nothing is registered under ``name``.
            DefinitionError: The arguments do not fit the pipeline's factory, or it raised on them.
        """
        origin = Origin(given=StepInput(args, kwargs), registered=True, rerun_of=rerun_of)
        entry, args, kwargs = built(name, self.pipeline(name), args, kwargs)
        return self.start(
            entry,
            args=args,
            kwargs=kwargs,
            idempotency_key=idempotency_key,
            name=name,
            deadline_s=deadline_s,
            on_created=on_created,
            origin=origin,
        )

    def rerun(self, run_id: str, *, on_created: Callable[[str, bool], None] | None = None) -> Run:
        """Re-run an ended run of a registered pipeline with its input (a sealed one is opened, then sealed
        for the new run), as a new run that records ``rerun_of``; the original lists it in ``reruns``.

        Raises:
            RunNotFound: No run has that id.
            CannotRerun: The run has not ended, was built on the spot, kept no input, or holds a sealed input
                while ``[encryption] keys`` is empty.
            UnknownPipeline: Its pipeline is no longer registered.
        """
        status = self.get_run(run_id).status()
        given, created = rerun_input(status, self.runtime.sealer), linked(self.store, run_id, on_created)
        return self.start_registered(
            status.pipeline, args=given.args, kwargs=given.kwargs, on_created=created, rerun_of=run_id
        )

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

    def runs(
        self,
        *,
        state: str | None = None,
        pipeline: str | None = None,
        since: Time | None = None,
        key: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        until: Time | None = None,
    ) -> RunPage:
        """Find retained runs, newest first: all, or those in ``state``, of ``pipeline``, started since
        ``since`` (``15m``, ``2h``, ``7d``, an ISO 8601 date, epoch ms or a datetime) and before ``until``, or
        started by ``key``.

        Pass a page's ``cursor`` to get the next one (None: it was the last).

        Raises:
            InvalidQuery: An unknown state, a ``since`` that is not a time, a bad limit or cursor.
        """
        query = run_query(state=state, pipeline=pipeline, since=since, key=key, until=until)
        return self.store.find_runs(query, limit=check_limit(limit), cursor=cursor)

    def run_for_key(self, idempotency_key: str) -> Run | None:
        """The run an idempotency key started, if it is still retained."""
        run_id = self.store.run_for_key(idempotency_key)
        return self._handle(run_id, created=False) if run_id else None

    @property
    def dead_letters(self) -> DeadLetterQueues:
        """List, show, replay and purge this namespace's dead letters."""
        return DeadLetterQueues(broker=self.broker, store=self.store, retention_s=self.settings.store.retention_s)

    def get_run(self, run_id: str) -> Run:
        """The handle of an existing run (``status()`` raises RunNotFound if there is none)."""
        return self._handle(run_id)

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
        connection: Any = None,
    ) -> Run[R]:
        """[`start`][pipelines.app.App.start] for asyncio code: the event loop runs on while the run is stored
        and published.

        With ``connection`` (a ``psycopg.AsyncConnection``), the run is written in its transaction.
        """
        if connection is not None:
            [(run_id, created)] = await self.runtime.start_in_async(
                connection,
                self.broker,
                [(as_node(node), args, kwargs)],
                name=name,
                idempotency_key=idempotency_key,
                deadline_s=deadline_s,
            )
            return self._handle(run_id, created)
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
        """[`run`][pipelines.app.App.run] for asyncio code."""
        return await self.aio().call(
            self.run, name, *args, idempotency_key=idempotency_key, deadline_s=deadline_s, **kwargs
        )

    async def publish_async(self, topic: str, payload: Any) -> str:
        """[`publish`][pipelines.app.App.publish] for asyncio code."""
        return await self.aio().call(self.publish, topic, payload)

    async def runs_async(self, **query: Any) -> RunPage:
        """[`runs`][pipelines.app.App.runs] for asyncio code (the same keyword arguments)."""
        return await self.aio().call(self.runs, **query)

    def pipeline(self, name: str) -> Node | Callable[..., Node]:
        """The pipeline registered as ``name``, or its factory.

        A name not registered in this process loads the ``[app]`` modules first (once), so a producer,
        a worker and the CLI all find the pipelines registered where the app is configured.

        Raises:
            UnknownPipeline: Nothing is registered under ``name``, even with the ``[app]`` modules loaded.
        """
        if name not in self.pipelines:
            try:
                self.load_modules()
            except ConfigError as e:
                raise unknown_pipeline(name, self.pipelines, loading=e) from None
        try:
            return self.pipelines[name]
        except KeyError:
            raise unknown_pipeline(name, self.pipelines, actors=self.settings.app.actors) from None

    def load_modules(self) -> None:
        """Import the actors and the registered pipelines named in the ``[app]`` config section (once).

        Raises:
            ConfigError: A module or attribute named there does not exist.
        """
        with self._loading:
            if self._modules_loaded:
                return
            for name, node in load_app_modules(self.settings.app).items():
                self.register(name, node)
            self._modules_loaded = True

    def close(self) -> None:
        if self._bridge is not None:
            self._bridge.close()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()  # exports what the batch processor still holds
        self.broker.close()
        self.store.close()
