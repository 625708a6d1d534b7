"""Runs created and their steps claimed, failed, reopened and kept, each decision one transaction with
the run's row locked: the meaning of ``create.lua``, ``claim.lua``, ``fail.lua``, ``finish.lua``,
``deadline.lua``, ``progress.lua``, ``reopen.lua`` and ``step_renew.lua`` (read them for the why), each
step's history kept as they keep it (:mod:`~pipelines.store.postgres.step_history`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.rows import dict_row

from pipelines.errors import ClaimLost
from pipelines.store.base import Claim, DeadlineCheck, NewRun, Renewal, ReopenKind
from pipelines.store.postgres.shared import GOING, NOW_MS, Cursor
from pipelines.store.postgres.statements import Statement, Writes
from pipelines.store.postgres.statements import run as run_writes
from pipelines.store.postgres.step_history import (
    CLAIM_ENTRY,
    REPLAY_ENTRY,
    StepLogs,
    appended,
    end,
    ended,
    ended_attempt,
)
from pipelines.store.step_history import FAILURE_OVERTAKEN, AttemptLog
from pipelines.wire.naming import run_id_for_key
from pipelines.wire.steps import ROOT, AddressNotInPlan, Frame, frames_json

#: Seconds between two deletions of a namespace's rows past their retention by one process, at least.
PURGE_EVERY_S = 1.0


class RunSteps(StepLogs):
    """``RunSteps`` (less the completion), ``StepProgress``, ``StepReplays`` and ``Holds`` on PostgreSQL."""

    _purged_at = -PURGE_EVERY_S

    def create_run(self, run: NewRun) -> tuple[str, bool]:
        return self.create_runs([run])[0]

    def create_runs(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        for run in runs:
            if run.idempotency_key and run.run_id != run_id_for_key(self._ns, run.idempotency_key):
                raise ValueError(
                    f"Run {run.run_id} has idempotency key {run.idempotency_key!r} but not its id: a keyed run's "
                    "id is naming.run_id_for_key(namespace, key), so that a second start finds the first run."
                )
        if not runs:
            return []
        with self._c.transaction() as cur:
            self._purge(cur)
            return [run_writes(cur, self._creation(run)) for run in runs]

    def _purge(self, cur: Cursor) -> None:
        """Delete what is past its retention (at most once a second per process: not on every start)."""
        if time.monotonic() - self._purged_at < min(PURGE_EVERY_S, self._retention_ms / 10_000):
            return
        self._purged_at = time.monotonic()
        for table in ("runs", "key_claims", "once_marks", "job_leases", "ticks", "workers", "count_minutes"):
            cur.execute(f"DELETE FROM {self._s}.{table} WHERE ns = %s AND expires_at <= {NOW_MS}", [self._ns])

    def _creation(self, run: NewRun) -> Writes[tuple[str, bool]]:
        """The writes that record ``run`` (its steps, where they start): (its id, whether they created it)."""
        s, ns = self._s, self._ns
        # A run past its retention that no purge deleted yet is gone: its id starts anew.
        yield Statement(
            f"DELETE FROM {s}.runs WHERE ns = %s AND run_id = %s AND expires_at <= {NOW_MS}", [ns, run.run_id]
        )
        created = yield Statement(
            f"INSERT INTO {s}.runs (ns, run_id, pipeline, status, created_at, idempotency_key, correlation_id, "
            "trace_id, trace_sampled, deadline_at, input, registered, rerun_of, touched, stall_due, expires_at) "
            f"SELECT %s, %s, %s, 'pending', now, %s, %s, %s, %s, CASE WHEN %s > 0 THEN now + %s END, %s, %s, %s, "
            f"now + %s, now + %s, now + %s FROM (SELECT {NOW_MS} AS now) t ON CONFLICT DO NOTHING RETURNING run_id",
            [
                ns,
                run.run_id,
                run.pipeline,
                run.idempotency_key or "",
                run.correlation_id or "",
                run.trace_id,
                run.trace_sampled if run.trace_id else True,
                round((run.deadline_s or 0) * 1000),
                round((run.deadline_s or 0) * 1000),
                run.input,
                run.registered,
                run.rerun_of,
                run.delay_ms,
                run.delay_ms,
                self._retention_ms,
            ],
            reads="one",
        )
        if created is None:
            return run.run_id, False
        yield Statement(
            f"INSERT INTO {s}.steps (ns, run_id, node, actor, up) VALUES (%s, %s, %s, %s, %s)",
            [(ns, run.run_id, node, actor, run.frames.get(node)) for node, actor in run.steps],
            reads="many",
        )
        yield Statement(
            f"INSERT INTO {s}.starts (ns, run_id, node, leaves, entries, input) VALUES (%s, %s, %s, %s, %s, %s)",
            [
                (ns, run.run_id, node, leaves, list(run.entries[node]), run.first_input if node == ROOT else None)
                for node, leaves in run.starts.items()
            ],
            reads="many",
        )
        return run.run_id, True

    def claim_step(
        self,
        run_id: str,
        node: str,
        *,
        attempt: int,
        lease_ms: int,
        worker: str = "",
        actor: str | None = None,
        up: Sequence[Frame] | None = None,
    ) -> Claim:
        with self._c.transaction() as cur:
            run, step = self._lock_step(cur, run_id, node)
            if run is None or step is None:
                return Claim("missing")
            if actor is not None and up is not None:
                if actor != step["actor"]:
                    raise AddressNotInPlan(run_id, node, f"it is a step of {step['actor']}, not of {actor}")
                if step["up"] is not None and frames_json(up) != step["up"]:
                    raise AddressNotInPlan(run_id, node, f"its ancestors are not the plan's {step['up']}")
            self._refuse_unreleased(cur, run_id, node, step)
            now, status = run["now"], run["status"]
            if run["deadline_at"] is not None and now > run["deadline_at"] and status in GOING:
                status = "failed"
                cur.execute(
                    f"UPDATE {self._s}.runs SET status = 'failed', error = 'deadline exceeded', failed_step = %s, "
                    "finished_at = %s WHERE ns = %s AND run_id = %s",
                    [node, now, self._ns, run_id],
                )
                self._notify(cur, run_id)
            if status not in GOING:
                if step["state"] in ("pending", "retrying"):
                    self._set_step(cur, run_id, node, "state = 'skipped'")
                return Claim("stopped", run_state=status)
            if step["state"] == "succeeded":
                return Claim("done")
            lease = step["lease_until"]
            if step["state"] == "running" and lease is not None and lease > now and step["attempts"] >= attempt:
                return Claim("busy", wait_ms=lease - now)
            self._set_step(
                cur,
                run_id,
                node,
                "state = 'running', attempts = attempts + 1, started_at = coalesce(started_at, %s), "
                f"lease_until = %s, claimed_here = false, worker = coalesce(nullif(%s, ''), worker), "
                f"history = {appended(CLAIM_ENTRY)}",
                [now, now + lease_ms, worker, now, worker],
            )
            cur.execute(
                f"UPDATE {self._s}.runs SET status = 'running', started_at = coalesce(started_at, %s), touched = %s "
                "WHERE ns = %s AND run_id = %s",
                [now, now, self._ns, run_id],
            )
            self._notify(cur, run_id)
            return Claim("run", attempt=step["attempts"] + 1)

    def _set_step(self, cur: Cursor, run_id: str, node: str, changes: str, values: Sequence[object] = ()) -> None:
        cur.execute(
            f"UPDATE {self._s}.steps SET {changes} WHERE ns = %s AND run_id = %s AND node = %s",
            [*values, self._ns, run_id, node],
        )

    def fail_step(
        self,
        run_id: str,
        node: str,
        error: str,
        *,
        final: bool,
        claim: int | None = None,
        logs: AttemptLog | None = None,
    ) -> int | None:
        with self._c.transaction() as cur:
            run, step = self._lock_step(cur, run_id, node)
            if run is None or step is None:
                return None
            now, state = run["now"], "failed" if final else "retrying"
            overtaken = claim is not None and step["attempts"] != claim
            if overtaken:
                # Only the attempt's own entry and logs: its retry may have claimed the step first.
                self._set_step(cur, run_id, node, f"history = {ended_attempt()}", [claim, end(now, state, error)])
            self._keep_logs(cur, run_id, node, logs)
            if not overtaken:
                return self._record_failure(cur, run, step, node=node, error=error, final=final)
        raise ClaimLost(FAILURE_OVERTAKEN)

    def _record_failure(
        self, cur: Cursor, run: dict[str, Any], step: dict[str, Any], *, node: str, error: str, final: bool
    ) -> int | None:
        """Record the failed attempt that holds the step (its row and its run's locked); a final one fails
        the run: its creation time then."""
        if step["state"] == "succeeded":
            return None
        run_id = str(run["run_id"])
        now, state = run["now"], "failed" if final else "retrying"
        self._set_step(
            cur,
            run_id,
            node,
            "error = %s, lease_until = NULL, state = %s, finished_at = CASE WHEN %s THEN %s ELSE finished_at END, "
            f"history = {ended()}",
            [error, state, final, now, end(now, state, error)],
        )
        cur.execute(f"UPDATE {self._s}.runs SET touched = %s WHERE ns = %s AND run_id = %s", [now, self._ns, run_id])
        if final and run["status"] in GOING:
            self._end_run(cur, run_id, now, "failed", error=error, failed_step=node)
            return int(run["created_at"])
        self._notify(cur, run_id)
        return None

    def _finish(self, run_id: str, status: str, error: str | None) -> bool:
        with self._c.transaction() as cur:
            run = self._lock_run(cur, run_id)
            if run is None or run["status"] not in GOING:
                return False
            self._end_run(cur, run_id, run["now"], status, error=error)
            return True

    def fail_run(self, run_id: str, error: str) -> None:
        self._finish(run_id, "failed", error)

    def cancel_run(self, run_id: str) -> bool:
        return self._finish(run_id, "cancelled", None)

    def enforce_deadline(self, run_id: str) -> DeadlineCheck:
        with self._c.transaction() as cur:
            run = self._lock_run(cur, run_id)
            if run is None or run["status"] not in GOING or not run["deadline_at"]:
                return DeadlineCheck("none")
            now = run["now"]
            if now <= run["deadline_at"]:
                return DeadlineCheck("wait", wait_ms=run["deadline_at"] - now)
            cur.execute(
                f"UPDATE {self._s}.steps SET state = 'failed', error = 'deadline exceeded', finished_at = %s, "
                f"lease_until = NULL, history = {ended()} WHERE ns = %s AND run_id = %s AND state = 'running' "
                "RETURNING node",
                [now, end(now, "failed", "deadline exceeded"), self._ns, run_id],
            )
            named = min((row["node"] for row in cur.fetchall()), default=None)
            self._end_run(cur, run_id, now, "failed", error="deadline exceeded", failed_step=named)
            return DeadlineCheck("failed", step=named)

    def report_progress(self, run_id: str, node: str, fraction: float | None, text: str) -> str | None:
        with self._c.transaction() as cur:
            cur.execute(
                f"SELECT {NOW_MS} AS now, status, deadline_at FROM {self._s}.runs WHERE ns = %s AND run_id = %s "
                f"AND expires_at > {NOW_MS}",
                [self._ns, run_id],
            )
            run = cur.fetchone()
            if run is None:
                return None
            if run["deadline_at"] and run["status"] in GOING and run["now"] > run["deadline_at"]:
                return "deadline"
            if fraction is not None:
                cur.execute(
                    f"UPDATE {self._s}.steps SET progress = %s, progress_text = %s WHERE ns = %s AND run_id = %s "
                    "AND node = %s RETURNING pg_notify(%s, %s)",
                    [float(fraction), text, self._ns, run_id, node, self._channel, f"{self._ns} {run_id}"],
                )
            return str(run["status"])

    def reopen_step(self, run_id: str, node: str, *, reason: str = "") -> tuple[ReopenKind, str | None]:
        with self._c.transaction() as cur:
            run, step = self._lock_step(cur, run_id, node)
            if run is None or step is None:
                return "missing", None
            if step["state"] == "succeeded":
                return "done", None
            start = self._unreleased(cur, run_id, step)
            if start is not None:
                return "not due", start
            status, now = run["status"], run["now"]
            if status not in GOING and status != "failed":
                return "stopped", status
            cur.execute(
                f"UPDATE {self._s}.runs SET status = CASE WHEN status = 'failed' THEN 'running' ELSE status END, "
                "error = CASE WHEN status = 'failed' THEN NULL ELSE error END, "
                "failed_step = CASE WHEN status = 'failed' THEN NULL ELSE failed_step END, "
                "finished_at = CASE WHEN status = 'failed' THEN NULL ELSE finished_at END, "
                "deadline_at = CASE WHEN status = 'failed' THEN NULL ELSE deadline_at END, "
                "touched = %s, expires_at = %s WHERE ns = %s AND run_id = %s",
                [now, now + self._retention_ms, self._ns, run_id],
            )
            self._set_step(
                cur,
                run_id,
                node,
                "state = 'retrying', error = NULL, lease_until = NULL, finished_at = NULL, "
                f"history = {appended(REPLAY_ENTRY)}",
                [reason, now],
            )
            self._notify(cur, run_id)
            return "reopened", None

    def renew_holds(self, steps: Mapping[tuple[str, str], int], keys: Mapping[str, str], *, lease_ms: int) -> Renewal:
        if not steps and not keys:
            return Renewal()
        lost: list[tuple[str, str]] = []
        ended: list[tuple[str, str]] = []
        lost_keys: list[str] = []
        # Each hold renewed on its own (autocommit): a renewal never holds one row while it waits for another.
        with self._c.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            for (run_id, node), claim in steps.items():
                cur.execute(
                    f"UPDATE {self._s}.steps s SET lease_until = CASE WHEN s.attempts = %s AND s.state = 'running' "
                    f"THEN {NOW_MS} + %s ELSE s.lease_until END FROM {self._s}.runs r WHERE r.ns = s.ns AND "
                    f"r.run_id = s.run_id AND r.expires_at > {NOW_MS} AND s.ns = %s AND s.run_id = %s AND s.node = %s "
                    "RETURNING s.attempts, s.state",
                    [claim, lease_ms, self._ns, run_id, node],
                )
                row = cur.fetchone()
                if row is not None and row["attempts"] != claim:
                    lost.append((run_id, node))
                elif row is None or row["state"] != "running":
                    ended.append((run_id, node))
            for key, holder in keys.items():
                cur.execute(
                    f"UPDATE {self._s}.key_claims SET expires_at = {NOW_MS} + %s WHERE ns = %s AND key = %s AND "
                    f"holder = %s AND NOT done AND expires_at > {NOW_MS}",
                    [lease_ms, self._ns, key, holder],
                )
                if not cur.rowcount:
                    lost_keys.append(key)
        return Renewal(lost_steps=tuple(lost), ended_steps=tuple(ended), lost_keys=tuple(lost_keys))
