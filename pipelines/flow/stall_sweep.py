"""Runs left running with nothing that will advance them: found by the stall sweep, re-driven or failed.

A run advances when its steps' messages are delivered, and one can be lost with nothing in flight to
replace it: a step whose completion could not be recorded and whose copy carrying the result was
dead-lettered and never replayed, or purged; a first step's message purged before it ran. A run none of
whose steps holds a live lease and which nothing touched for ``stalled_after_s`` (claims, completions,
failures, its steps' keep-alives: ``pipelines.store.stall_checks``) is stalled. The sweep publishes its idle
steps again, built from what the store keeps (the leaves that start there and what they receive), as
the run would have: a claim absorbs a copy of a message that was only late (it finds the step running
or done), and a step whose actor had run and whose result was lost runs again (its effect key keeps
the effect once). A re-drive without a step finishing waits twice as long as the one before; after
``redrives`` of them, or when nothing can be published, the store has failed the run with the reason.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import dramatiq
import orjson

from pipelines.broker.common import PipelineBroker
from pipelines.context import correlation
from pipelines.flow.runtime import Runtime
from pipelines.flow.step_messages import StepInput, step_messages
from pipelines.payloads.sealing import Opening, Unsealable
from pipelines.store.base import StallCheck, StalledGroup
from pipelines.store.roles import StallChecks
from pipelines.wire.steps import Leaf

logger = logging.getLogger(__name__)

#: Most runs one look at the index of running runs reads.
SWEEP_BATCH = 500
#: Most looks one sweep makes; what is left waits for the next sweep.
SWEEP_LOOKS = 20
#: Longest time between two sweeps (and two keep-alives), in s.
MOST_SWEEP_EVERY_S = 60.0


class StallSweep:
    """Finds stalled runs and publishes their idle steps again (see the module docstring)."""

    def __init__(
        self, *, store: StallChecks, runtime: Runtime, stalled_after_s: float, redrives: int, lease_s: float
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.stalled_after_s = stalled_after_s
        self.redrives = redrives
        self.every_s = min(MOST_SWEEP_EVERY_S, stalled_after_s / 4)
        """How often the workers keep their runs alive and one of them sweeps: a quarter of the threshold."""
        self.lease_s = lease_s
        self.lapse_every_s = min(self.every_s, lease_s / 4)
        """How often one worker sweeps for local steps whose lease lapsed: a quarter of the lease."""

    def sweep(self, broker: PipelineBroker) -> list[StallCheck]:
        """Look at the runs untouched for the threshold; re-drive the stalled ones. Returns the stalled
        runs found (re-driven, or failed by the store)."""
        stalled: list[StallCheck] = []
        for _ in range(SWEEP_LOOKS):
            checks = self.store.sweep_stalled(
                stalled_after_ms=round(self.stalled_after_s * 1000),
                redrives=self.redrives,
                gap_ms=round(3 * self.every_s * 1000),
                limit=SWEEP_BATCH,
            )
            for check in checks:
                if check.kind == "redrive":
                    self._redrive(broker, check)
                elif check.kind == "failed":
                    self._failed(check)
            stalled += [check for check in checks if check.kind in ("redrive", "failed")]
            if len(checks) < SWEEP_BATCH:
                break
        return stalled

    def sweep_lapsed(self, broker: PipelineBroker) -> list[StallCheck]:
        """Publish again the local steps whose lease lapsed (their worker died: nothing of them is in
        RabbitMQ); returns the runs they belong to."""
        lapsed = []
        for _ in range(SWEEP_LOOKS):
            checks = self.store.sweep_lapsed(lease_ms=round(self.lease_s * 1000), limit=SWEEP_BATCH)
            for check in checks:
                if check.kind == "redrive":
                    steps = ", ".join(step for group in check.groups for step in group.steps)
                    logger.warning(
                        "Run %s: the worker of its step(s) %s stopped renewing their lease; publishing them again.",
                        check.run_id,
                        steps,
                    )
                    self._publish(broker, check)
                    lapsed.append(check)
            if len(checks) < SWEEP_BATCH:
                break
        return lapsed

    def _redrive(self, broker: PipelineBroker, check: StallCheck) -> None:
        steps = [step for group in check.groups for step in group.steps]
        logger.warning(
            "Run %s: nothing advanced it for %g s or more; publishing step(s) %s again (re-drive %d of at most %d).",
            check.run_id,
            self.stalled_after_s,
            ", ".join(steps),
            check.redrive,
            self.redrives,
        )
        self._publish(broker, check)

    def _publish(self, broker: PipelineBroker, check: StallCheck) -> None:
        try:
            messages = [message for group in check.groups for message in self._messages(check, group)]
            with correlation(check.correlation_id):
                broker.enqueue_many(messages)
        except Exception:  # one run that cannot be published must not stop the sweep of the others
            logger.exception("Could not re-drive run %s; the next sweep looks at it again.", check.run_id)

    def _messages(self, check: StallCheck, group: StalledGroup) -> list[dramatiq.Message[Any]]:
        idle = set(group.steps)
        leaves = [Leaf.from_json(data) for data in self._opened(check, group.leaves_json) if data["node"] in idle]
        args, kwargs = self._opened(check, group.input_json)
        return step_messages(leaves, run_id=check.run_id, pipeline=check.pipeline, given=StepInput(tuple(args), kwargs))

    def _opened(self, check: StallCheck, text: str) -> Any:
        """A list the store keeps (leaves, or what they receive), opened if it was sealed as a whole (the
        first steps', when one of their actors encrypts: a list is never kept sealed otherwise)."""
        kept = orjson.loads(text)
        if isinstance(kept, dict):
            if self.runtime.sealer is None:
                raise Unsealable("The run's first steps are kept sealed, and [encryption] keys is empty.")
            kept = self.runtime.sealer.open_sealed(kept, Opening(run=check.run_id))
        return kept

    def _failed(self, check: StallCheck) -> None:
        logger.error("Run %s failed at step %s: %s.", check.run_id, check.step or "(none)", check.error)
        if check.created_at_ms is None:
            return
        for listener in self.runtime.listeners:
            listener.run_finished(check.pipeline, "failed", time.time() - check.created_at_ms / 1000)
