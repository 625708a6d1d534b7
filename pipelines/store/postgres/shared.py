"""What every part of the PostgreSQL store shares: its connections, namespace, retention and bounds of
steps' logs, a run's row locked for a decision, a step refused until its run released it, and the
notification that tells waiters a run changed."""

from __future__ import annotations

from typing import Any

import orjson
from psycopg.rows import dict_row

from pipelines.store.base import FINAL_RUN_STATES
from pipelines.store.postgres.connection import Connections, Cursor
from pipelines.store.postgres.schema import NOW_MS
from pipelines.store.step_history import STEP_LOG_BOUNDS
from pipelines.wire.steps import ROOT, AddressNotInPlan, Frame, released_under

#: Run states in which a run still goes.
GOING = ("pending", "running")

__all__ = ["FINAL_RUN_STATES", "GOING", "NOW_MS", "Connections", "Cursor", "Part", "channel_of"]


def channel_of(schema: str) -> str:
    """The channel a schema's run changes are notified on (``NOTIFY``), with ``<namespace> <run id>``."""
    return f"pipelines:{schema}"


class Part:
    """A part of the store: its connections, namespace and retention (ms), and the most log records and
    bytes a step keeps (``step_logs``)."""

    def __init__(
        self,
        *,
        connections: Connections,
        namespace: str,
        retention_ms: int,
        step_logs: tuple[int, int] = STEP_LOG_BOUNDS,
    ) -> None:
        self._c = connections
        self._ns = namespace
        self._retention_ms = retention_ms
        self._log_bounds = step_logs
        self._s = connections.s
        self._channel = channel_of(connections.schema)

    def _lock_run(self, cur: Cursor, run_id: str) -> dict[str, Any] | None:
        """The run's record with the store's time (``now``), its row locked until the transaction ends;
        None for a run unknown or past its retention."""
        cur.execute(
            f"SELECT {NOW_MS} AS now, * FROM {self._s}.runs WHERE ns = %s AND run_id = %s AND expires_at > {NOW_MS} "
            "FOR UPDATE",
            [self._ns, run_id],
        )
        return cur.fetchone()

    def _lock_step(self, cur: Cursor, run_id: str, node: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """:meth:`_lock_run` and the run's step ``node`` (None: no such step), in one round trip.

        Two statements, not a join: the step is read after the run's lock is granted, so a decision that
        waited for the lock sees what the one before it wrote (a join would see the step as it was when the
        statement began). The pipeline sends them together.
        """
        with cur.connection.cursor(row_factory=dict_row) as steps:
            cur.execute(
                f"SELECT {NOW_MS} AS now, * FROM {self._s}.runs WHERE ns = %s AND run_id = %s AND expires_at > "
                f"{NOW_MS} FOR UPDATE",
                [self._ns, run_id],
            )
            steps.execute(
                f"SELECT * FROM {self._s}.steps WHERE ns = %s AND run_id = %s AND node = %s", [self._ns, run_id, node]
            )
            run = cur.fetchone()
            return run, steps.fetchone() if run is not None else None

    def _unreleased(self, cur: Cursor, run_id: str, step: dict[str, Any]) -> str | None:
        """The continuation a step that never succeeded starts in (:func:`released_under`) while its run has
        not released it yet, else None: such a step neither runs, ends nor reopens (``claim.lua`` says why)."""
        if step["state"] == "succeeded" or step["up"] is None:
            return None
        start = released_under(Frame.from_json(frame) for frame in orjson.loads(step["up"]))
        if start == ROOT:
            return None
        cur.execute(
            f"SELECT input IS NOT NULL AS released FROM {self._s}.starts WHERE ns = %s AND run_id = %s AND node = %s",
            [self._ns, run_id, start],
        )
        row = cur.fetchone()
        return start if row is None or not row["released"] else None

    def _refuse_unreleased(self, cur: Cursor, run_id: str, node: str, step: dict[str, Any]) -> None:
        """Refuse a message for a step its run has not released yet: its run did not send it.

        Raises:
            AddressNotInPlan: The run has not released the step yet (:meth:`_unreleased`).
        """
        start = self._unreleased(cur, run_id, step)
        if start is not None:
            raise AddressNotInPlan(run_id, node, f"it is not due: its run has not released {start} yet")

    def _notify(self, cur: Cursor, run_id: str) -> None:
        """Tell whoever waits on the run that it changed (delivered when the transaction commits)."""
        cur.execute("SELECT pg_notify(%s, %s)", [self._channel, f"{self._ns} {run_id}"])

    def _end_run(
        self,
        cur: Cursor,
        run_id: str,
        now: int,
        status: str,
        *,
        error: str | None = None,
        failed_step: str | None = None,
    ) -> None:
        """Record the run's end (kept a retention from now) and notify it."""
        cur.execute(
            f"UPDATE {self._s}.runs SET status = %s, error = coalesce(%s, error), failed_step = coalesce(%s, "
            "failed_step), finished_at = %s, expires_at = %s WHERE ns = %s AND run_id = %s",
            [status, error, failed_step, now, now + self._retention_ms, self._ns, run_id],
        )
        self._notify(cur, run_id)
