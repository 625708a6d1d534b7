"""Starting runs: a pipeline compiled, its run recorded and its first steps published.

The producer side of :class:`~pipelines.flow.runtime.Runtime` (the worker side, which advances a run as
its steps end, is there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import dramatiq
from opentelemetry import context, trace

from pipelines import options as opt
from pipelines.broker.common import PipelineBroker
from pipelines.composition import Node, shape_name
from pipelines.context import current_correlation_id, new_correlation_id
from pipelines.errors import error_name
from pipelines.flow.compiled_plans import compiled_plan
from pipelines.flow.deadlines import schedule_deadline_checks
from pipelines.flow.step_messages import StepInput, step_messages
from pipelines.flow.stored_runs import first_steps_kept, input_kept, stored_starts
from pipelines.payloads.sealing import Sealer
from pipelines.store.base import NewRun
from pipelines.store.roles import RunSteps
from pipelines.wire import trace_context
from pipelines.wire.naming import new_id, run_id_for_key
from pipelines.wire.steps import ROOT

logger = logging.getLogger(__name__)


class RunListener(Protocol):
    """Told when a run ends and when a chord's barrier releases (the metrics middleware listens)."""

    def run_finished(self, pipeline: str, outcome: Literal["succeeded", "failed"], duration_s: float) -> None: ...

    def chord_released(self, pipeline: str, wait_s: float) -> None: ...

    def step_lost(self, actor: str) -> None: ...

    def step_hopped(self, actor: str, *, local: bool) -> None: ...


@dataclass(frozen=True)
class Origin:
    """How a run was asked for, as its record keeps it.

    ``given`` is what it was started with when that is not what its first steps receive (a registered
    factory's own arguments); ``registered``, whether a registered pipeline's name started it; and
    ``rerun_of``, the run it re-runs.
    """

    given: StepInput | None = None
    registered: bool = False
    rerun_of: str | None = None


class RunStarts:
    """Starts runs: the producer side of :class:`~pipelines.flow.runtime.Runtime`, which holds no state
    of its own beyond the store. With a ``tracer``, starting a run opens its root span (a child of the
    caller's current span)."""

    def __init__(
        self,
        *,
        store: RunSteps,
        lease_s: float,
        max_result_bytes: int,
        tracer: trace.Tracer | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.store = store
        self.lease_ms = int(lease_s * 1000)
        self.max_result_bytes = max_result_bytes
        self.tracer = tracer
        self.sealer = sealer
        """Seals the results of encrypting actors before they are stored or passed on."""
        self.listeners: list[RunListener] = []

    # -- producer side --------------------------------------------------------------------------

    def start(
        self,
        broker: PipelineBroker,
        node: Node,
        *,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
        delay_ms: int | None = None,
        first_options: Mapping[str, Any] | None = None,
        on_created: Callable[[str, bool], None] | None = None,
        origin: Origin | None = None,
    ) -> tuple[str, bool]:
        """Record a run of ``node`` and publish its first steps (after ``delay_ms``, if given).

        The run's correlation id is the caller's (``pipelines.correlation``, or the message being
        processed), else a new one; every message of the run carries it. After ``deadline_s`` seconds
        no further step starts and the run fails with "deadline exceeded".

        Returns:
            (run id, created): ``created`` is False when ``idempotency_key`` already started a run.

        Raises:
            UnknownActor: A step names an actor the broker does not know.
            DefinitionError: Arguments that are not JSON.
            PublishError, BrokerUnavailable, StoreUnavailable: The run could not start (if it was
                recorded, it is marked failed with the reason, as it is when a Ctrl-C interrupts the start).
        """
        started = self.start_many(
            broker,
            [(node, args, kwargs)],
            name=name,
            idempotency_key=idempotency_key,
            deadline_s=deadline_s,
            delay_ms=delay_ms,
            first_options=first_options,
            on_created=on_created,
            origin=origin,
        )
        return started[0]

    def start_many(
        self,
        broker: PipelineBroker,
        runs: Sequence[tuple[Node, tuple[Any, ...], Mapping[str, Any] | None]],
        *,
        name: str | None = None,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
        delay_ms: int | None = None,
        first_options: Mapping[str, Any] | None = None,
        on_created: Callable[[str, bool], None] | None = None,
        origin: Origin | None = None,
    ) -> list[tuple[str, bool]]:
        """Start several runs with one store round trip and one confirmed publish (see :meth:`start`).

        Each ``runs`` item is (pipeline, args, kwargs). With tracing, each run gets a root span of its
        own, a child of the caller's current span. ``first_options`` are added to every first-step
        message (a pipeline's rate limit and the slot reserved for the run).
        ``on_created(run id, created)`` is called once the store has recorded each run, before anything
        is published (a slow broker does not hide the id); when it raises (a Ctrl-C, a closed pipe), the
        runs are failed as any interrupted start is, and nothing is published. ``origin`` is kept with
        each run (see :class:`Origin`).
        """
        with self._preparing(
            broker,
            runs,
            name=name,
            idempotency_key=idempotency_key,
            deadline_s=deadline_s,
            delay_ms=delay_ms,
            origin=origin,
        ) as prepared:
            try:
                outcomes = self.store.create_runs([record for record, _ in prepared])
            except BaseException as e:
                # Interrupted (Ctrl-C) or cut off while the store wrote: a run it did record must not stay
                # pending with nothing published (an unknown id is left alone, an existing key's run too).
                self._fail_unstarted([(record.run_id, True) for record, _ in prepared], e)
                raise
            if on_created is not None:
                try:
                    for run_id, created in outcomes:
                        on_created(run_id, created)
                except BaseException as e:
                    # Ctrl-C, or a closed pipe while the CLI prints the id: nothing was published yet.
                    self._fail_unstarted(outcomes, e)
                    raise
            messages = [m for (_, batch), (_, made) in zip(prepared, outcomes, strict=True) if made for m in batch]
            if first_options:
                messages = [m.copy(options=dict(first_options)) for m in messages]
            if messages:
                self._publish_first_steps(broker, messages, outcomes, traced=self.tracer is not None, delay_ms=delay_ms)
                schedule_deadline_checks(broker, [run_id for run_id, made in outcomes if made], deadline_s)
            return outcomes

    @contextmanager
    def _preparing(
        self,
        broker: PipelineBroker,
        runs: Sequence[tuple[Node, tuple[Any, ...], Mapping[str, Any] | None]],
        *,
        name: str | None,
        idempotency_key: str | None,
        deadline_s: float | None,
        delay_ms: int | None = None,
        origin: Origin | None = None,
    ) -> Iterator[list[tuple[NewRun, list[dramatiq.Message[Any]]]]]:
        """Each run's record and first messages, made within its root span (with tracing), ended on the way out."""
        names = [name or shape_name(node) for node, _, _ in runs]
        with self._run_spans(names) as spans:
            yield [
                self._prepare(
                    broker,
                    node,
                    args,
                    kwargs,
                    pipeline=names[index],
                    idempotency_key=idempotency_key,
                    deadline_s=deadline_s,
                    delay_ms=delay_ms or 0,
                    span=spans[index] if spans else None,
                    origin=origin or Origin(),
                )
                for index, (node, args, kwargs) in enumerate(runs)
            ]

    @contextmanager
    def _run_spans(self, names: Sequence[str]) -> Iterator[list[trace.Span]]:
        """With tracing, a root span per run (a child of the caller's current span), ended on the way out."""
        spans: list[trace.Span] = []
        if self.tracer is not None:
            spans = [
                self.tracer.start_span(
                    f"run {pipeline}", kind=trace.SpanKind.PRODUCER, attributes={"pipeline.name": pipeline}
                )
                for pipeline in names
            ]
        try:
            yield spans
        finally:
            for span in spans:
                span.end()

    def _publish_first_steps(
        self,
        broker: PipelineBroker,
        messages: list[dramatiq.Message[Any]],
        outcomes: list[tuple[str, bool]],
        *,
        traced: bool,
        delay_ms: int | None,
    ) -> None:
        # Publish spans take their parent from each message's run span, not from whatever is current.
        token = context.attach(context.Context()) if traced else None
        try:
            broker.enqueue_many(messages, delay=delay_ms)
        except BaseException as e:
            # Not only PublishError: Ctrl-C or any other error mid-publish leaves no run pending forever.
            self._fail_unstarted(outcomes, e)
            raise
        finally:
            if token is not None:
                context.detach(token)

    def _fail_unstarted(self, outcomes: Sequence[tuple[str, bool]], error: BaseException) -> None:
        """Mark the runs this start created failed, with why their first steps were not all published."""
        why = "interrupted" if isinstance(error, KeyboardInterrupt) else f"{error_name(error)}: {error}"
        reason = f"The run could not be started: {why}".rstrip(": ")
        for run_id, created in outcomes:
            if not created:
                continue
            try:
                self.store.fail_run(run_id, reason)
            except Exception as store_error:  # the store is what failed: say so on the error raised
                error.add_note(f"Run {run_id} may stay pending until its retention: {store_error}")

    def _prepare(
        self,
        broker: PipelineBroker,
        node: Node,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None,
        *,
        pipeline: str,
        idempotency_key: str | None,
        deadline_s: float | None,
        delay_ms: int,
        span: trace.Span | None,
        origin: Origin,
    ) -> tuple[NewRun, list[dramatiq.Message[Any]]]:
        compiled = compiled_plan(node)
        compiled.check(broker, StepInput(args, kwargs))
        # A keyed run's id is its key's: a second start with the key finds the first run by its id.
        run_id = run_id_for_key(broker.namespace, idempotency_key) if idempotency_key else new_id()
        correlation_id = current_correlation_id() or new_correlation_id()
        messages = step_messages(compiled.plan.entry, run_id=run_id, pipeline=pipeline, given=StepInput(args, kwargs))
        carrier: dict[str, str] = {}
        if span is not None:
            span.set_attribute("pipeline.run_id", run_id)
            carrier = trace_context.carrier(span.get_span_context())
        for message in messages:
            message.options[opt.CORRELATION] = correlation_id
            if carrier:
                message.options[opt.TRACE] = dict(carrier)
        trace_id = span.get_span_context().trace_id if span is not None else None
        starts, entries = dict(stored_starts(broker, compiled, self.sealer)), dict(compiled.entries)
        first = first_steps_kept(broker, compiled.plan.entry, StepInput(args, kwargs), self.sealer, run_id)
        if first is not None:  # where steps start, the first ones too: the stall sweep publishes from there
            starts[ROOT], entries[ROOT] = first[0], [leaf.node for leaf in compiled.plan.entry]
        run_input = first[1] if first is not None else None
        if origin.given is not None:  # a factory's arguments may reach any step: sealed if any step encrypts
            run_input = input_kept(broker, compiled.plan.leaves, origin.given, self.sealer, run_id)
        record = NewRun(
            run_id=run_id,
            pipeline=pipeline,
            steps=compiled.steps,
            frames=compiled.frames,
            starts=starts,
            entries=entries,
            idempotency_key=idempotency_key,
            correlation_id=correlation_id,
            deadline_s=deadline_s,
            trace_id=format(trace_id, "032x") if trace_id is not None else None,
            trace_sampled=span is None or span.get_span_context().trace_flags.sampled,
            first_input=first[1] if first is not None else None,
            delay_ms=delay_ms,
            input=run_input,
            registered=origin.registered,
            rerun_of=origin.rerun_of,
        )
        return record, messages
