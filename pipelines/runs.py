"""The handle a caller gets back when a run starts: follow it, wait for it, cancel it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, cast

from typing_extensions import TypeVar

from pipelines.errors import RunCancelled, RunFailed, RunNotFound, RunTimeout
from pipelines.ids import full_id
from pipelines.payloads.sealing import Opening, Sealer
from pipelines.store.base import RunStatus
from pipelines.store.roles import RunViews

if TYPE_CHECKING:
    from pipelines.aio import AsyncBridge


#: The run's result type: its pipeline's last step's return type where a type checker can tell.
R = TypeVar("R", default=Any)


class Run(Generic[R]):
    """A pipeline run, by id. Cheap to create: every call reads the run store.

    ``Run[R]``: ``result()`` returns an ``R``, the return type of the pipeline's last step when it was
    built with ``step``/``chain``/``chord`` (``Any`` for registered pipelines started by name).
    """

    def __init__(
        self,
        run_id: str,
        *,
        store: RunViews,
        created: bool = True,
        sealer: Sealer | None = None,
        bridge: Callable[[], AsyncBridge] | None = None,
    ) -> None:
        self.id = run_id
        self.created = created
        """False when an idempotency key returned an existing run."""
        self._store = store
        self._sealer = sealer
        self._bridge = bridge

    def __repr__(self) -> str:
        return f"Run({self.id!r})"

    def status(self) -> RunStatus:
        """The run's state, its steps' states and timings.

        Raises:
            RunNotFound: No such run, or it is past its retention.
        """
        status = self._store.get_run(self.id)
        if status is None:
            raise RunNotFound(f"No run {self.id} in the run store (never started, or past store.retention_s).")
        return status

    def wait(
        self, timeout_s: float | None = None, *, on_change: Callable[[RunStatus], None] | None = None
    ) -> RunStatus:
        """Block until the run ends (succeeded, failed or cancelled) and return its status.

        Args:
            timeout_s: Seconds to wait at most; None waits as long as it takes.
            on_change: Called with the latest status as steps change (for progress displays).

        Raises:
            RunTimeout: Still running after ``timeout_s``.
            RunNotFound: No such run.
        """
        return self._ended(self._store.wait_run(self.id, timeout_s, on_change), timeout_s)

    async def wait_async(self, timeout_s: float | None = None) -> RunStatus:
        """[`wait`][pipelines.runs.Run.wait] for asyncio code: the event loop runs on, and waiting takes no
        thread of its own.

        Raises:
            RunTimeout, RunNotFound: As for [`wait`][pipelines.runs.Run.wait].
        """
        if self._bridge is None:
            raise RuntimeError("This Run was made without an app; get it from app.start_async() or app.get_run().")
        bridge = self._bridge()
        try:
            status = await asyncio.wait_for(bridge.watcher.until_final(self.id), timeout_s)
        except TimeoutError:
            status = await bridge.call(self._store.get_run, self.id)
        return self._ended(status, timeout_s)

    def _ended(self, status: RunStatus | None, timeout_s: float | None) -> RunStatus:
        if status is None:
            raise RunNotFound(f"No run {self.id} in the run store (never started, or past store.retention_s).")
        if not status.is_final:
            done = status.count("succeeded")
            raise RunTimeout(
                f"Run {self.id} is still {status.state} after {timeout_s} s ({done}/{len(status.steps)} steps done)."
            )
        return status

    def result(self, timeout_s: float | None = None) -> R:
        """Wait for the run and return its result.

        Raises:
            RunFailed: It failed (``.step`` and ``.error`` say where and why).
            RunCancelled: It was cancelled.
            RunTimeout, RunNotFound: As for [`wait`][pipelines.runs.Run.wait].
        """
        return self._outcome(self.wait(timeout_s))

    async def result_async(self, timeout_s: float | None = None) -> R:
        """[`result`][pipelines.runs.Run.result] for asyncio code (see
        [`wait_async`][pipelines.runs.Run.wait_async])."""
        return self._outcome(await self.wait_async(timeout_s))

    def _outcome(self, status: RunStatus) -> R:
        if status.state == "failed":
            raise RunFailed(self.id, status.failed_step, status.error)
        if status.state == "cancelled":
            raise RunCancelled(f"Run {self.id} was cancelled.")
        # An encrypting actor's result is stored sealed; the caller gets it opened (with the keys).
        result = self._sealer.open(status.result, Opening(run=self.id)) if self._sealer is not None else status.result
        return cast(R, result)  # what the last step returned, decoded from JSON

    def cancel(self) -> bool:
        """Cancel the run: steps that have not started never run. False if it had already ended."""
        return self._store.cancel_run(self.id)


#: Length of a run's id (32 hex digits): a shorter id given by a person is a prefix to look up.
RUN_ID_LENGTH = 32
#: Runs an ambiguous prefix lists, at most (one more tells that there are more).
PREFIX_CANDIDATES = 11


def full_run_id(store: RunViews, id_or_prefix: str) -> str:
    """The id of the run with this id, or of the one retained run whose id begins with it, as git takes
    a commit; an id that matches nothing is returned as given (its ``status()`` raises RunNotFound).

    Raises:
        AmbiguousId: The ids of several runs begin with it.
    """
    if len(id_or_prefix) >= RUN_ID_LENGTH:
        return id_or_prefix
    return full_id(id_or_prefix, store.run_ids_starting(id_or_prefix, limit=PREFIX_CANDIDATES), what="run")
