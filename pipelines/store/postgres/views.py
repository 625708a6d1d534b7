"""Runs as callers see them on PostgreSQL: read, awaited (``LISTEN``, no polling), found by key, by id or
by age, with their plans and results. A page of runs is one indexed query, newest first, whatever it
filters by; its cursor is the creation time and id of its last run."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from psycopg.rows import dict_row

from pipelines.errors import InvalidQuery
from pipelines.store.base import (
    RunPage,
    RunQuery,
    RunState,
    RunStatus,
    RunSummary,
    StepStatus,
    shown_step_state,
)
from pipelines.store.postgres.feed import PostgresRunFeed, wait_on_notifications
from pipelines.store.postgres.shared import FINAL_RUN_STATES, NOW_MS, Part
from pipelines.store.step_history import history_of
from pipelines.wire.naming import run_id_for_key
from pipelines.wire.steps import ROOT

#: A runs page's cursor: the creation time (epoch ms) and id of the last run it showed.
_CURSOR = re.compile(r"([0-9]{1,15})~(.+)", re.DOTALL)


class RunViews(Part):
    """``RunViews``, ``RunFeeds`` and ``RunPlans`` on PostgreSQL."""

    def _one(self, query: str, values: list[Any]) -> dict[str, Any] | None:
        with self._c.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, values)
            return cur.fetchone()

    def _all(self, query: str, values: list[Any]) -> list[dict[str, Any]]:
        with self._c.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, values)
            return cur.fetchall()

    def _kept(self) -> str:
        """The condition that a run of the namespace is retained (its values: the namespace)."""
        return f"ns = %s AND expires_at > {NOW_MS}"

    def run_state(self, run_id: str) -> RunState | None:
        row = self._one(f"SELECT status FROM {self._s}.runs WHERE {self._kept()} AND run_id = %s", [self._ns, run_id])
        return cast(RunState, row["status"]) if row is not None else None

    def get_run(self, run_id: str) -> RunStatus | None:
        # One statement: the run and its steps as of one moment.
        run = self._one(
            f"SELECT r.*, (SELECT coalesce(json_agg(s), '[]') FROM {self._s}.steps s WHERE s.ns = r.ns AND "
            f"s.run_id = r.run_id) AS steps FROM {self._s}.runs r WHERE {self._kept()} AND run_id = %s",
            [self._ns, run_id],
        )
        if run is None:
            return None
        steps = run["steps"]
        state = run["status"]
        shown = sorted(
            (
                StepStatus(
                    node=step["node"],
                    actor=step["actor"],
                    state=shown_step_state(state, step["state"]),
                    attempts=step["attempts"],
                    started_at_ms=step["started_at"],
                    finished_at_ms=step["finished_at"],
                    error=step["error"],
                    progress=step["progress"],
                    progress_text=step["progress_text"] or None,
                    worker=step["worker"] or None,
                    history=history_of(step["history"]),
                )
                for step in steps
            ),
            key=lambda step: [int(part) for part in step.node.split(".")],
        )
        return RunStatus(
            run_id=run["run_id"],
            pipeline=run["pipeline"],
            state=state,
            created_at_ms=run["created_at"],
            started_at_ms=run["started_at"],
            finished_at_ms=run["finished_at"],
            result_json=run["result"],
            error=run["error"] or None,
            failed_step=run["failed_step"] or None,
            correlation_id=run["correlation_id"] or None,
            trace_id=run["trace_id"] or None,
            trace_sampled=run["trace_sampled"],
            steps=tuple(shown),
            input_json=run["input"],
            registered=run["registered"],
            rerun_of=run["rerun_of"],
            reruns=tuple(run["reruns"]),
        )

    def wait_run(
        self,
        run_id: str,
        timeout_s: float | None,
        on_change: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus | None:
        conn = self._c.dedicated()
        with self._c.answering():
            wait_on_notifications(
                conn,
                self._channel,
                f"{self._ns} {run_id}",
                ended=lambda: self.run_state(run_id) in (None, *FINAL_RUN_STATES),
                read=lambda: self.get_run(run_id),
                timeout_s=timeout_s,
                on_change=on_change,
            )
        return self.get_run(run_id)

    def run_feed(self) -> PostgresRunFeed:
        return PostgresRunFeed(self._c.dedicated(), self._channel, self._ns, self._c.answering)

    def link_rerun(self, run_id: str, rerun_id: str) -> None:
        with self._c.connection() as conn:
            conn.execute(
                f"UPDATE {self._s}.runs SET reruns = reruns || ARRAY[%s] WHERE {self._kept()} AND run_id = %s",
                [rerun_id, self._ns, run_id],
            )

    def run_for_key(self, idempotency_key: str) -> str | None:
        run_id = run_id_for_key(self._ns, idempotency_key)
        return run_id if self.run_state(run_id) is not None else None

    def recent_runs(self, limit: int) -> list[str]:
        rows = self._all(
            f"SELECT run_id FROM {self._s}.runs WHERE {self._kept()} ORDER BY created_at DESC, run_id DESC LIMIT %s",
            [self._ns, limit],
        )
        return [row["run_id"] for row in rows]

    def run_ids_starting(self, prefix: str, *, limit: int) -> list[str]:
        pattern = re.sub(r"([%_\\])", r"\\\1", prefix) + "%"
        rows = self._all(
            f"SELECT run_id FROM {self._s}.runs WHERE {self._kept()} AND run_id LIKE %s LIMIT %s",
            [self._ns, pattern, limit],
        )
        return [row["run_id"] for row in rows]

    def find_runs(self, query: RunQuery, *, limit: int, cursor: str | None = None) -> RunPage:
        conditions: list[str] = [self._kept()]
        values: list[str | int] = [self._ns]
        if cursor is not None:
            found = _CURSOR.fullmatch(cursor)
            if found is None:
                raise InvalidQuery(
                    f"{cursor!r} is not a cursor of a runs page: pass the one the previous page returned."
                )
            conditions.append("(created_at, run_id) < (%s, %s)")
            values += [int(found[1]), found[2]]
        for condition, value in (
            ("status = %s", query.state),
            ("pipeline = %s", query.pipeline),
            ("created_at >= %s", query.since_ms),
            ("created_at <= %s", query.until_ms),
            ("run_id = %s", None if query.key is None else run_id_for_key(self._ns, query.key)),
        ):
            if value is not None:
                conditions.append(condition)
                values.append(value)
        rows = self._all(
            f"SELECT r.*, (SELECT count(*) FROM {self._s}.steps s WHERE s.ns = r.ns AND s.run_id = r.run_id) AS total "
            f"FROM {self._s}.runs r WHERE {' AND '.join(conditions)} ORDER BY created_at DESC, run_id DESC LIMIT %s",
            [*values, limit + 1],
        )
        page = tuple(_summary(row) for row in rows[:limit])
        more = len(rows) > limit
        return RunPage(page, f"{page[-1].created_at_ms}~{page[-1].run_id}" if more else None)

    def run_continuations(self, run_id: str) -> dict[str, str]:
        rows = self._all(
            f"SELECT node, leaves FROM {self._s}.starts WHERE ns = %s AND run_id = %s AND node <> %s",
            [self._ns, run_id, ROOT],
        )
        return {row["node"]: row["leaves"] for row in rows} if self.run_state(run_id) is not None else {}

    def run_first_steps(self, run_id: str) -> tuple[str, str] | None:
        row = self._one(
            f"SELECT leaves, input FROM {self._s}.starts WHERE ns = %s AND run_id = %s AND node = %s",
            [self._ns, run_id, ROOT],
        )
        if row is None or row["input"] is None or self.run_state(run_id) is None:
            return None
        return str(row["leaves"]), str(row["input"])

    def step_result(self, run_id: str, node: str, member_of: tuple[str, int] | None = None) -> str | None:
        if member_of is None:
            row = self._one(
                f"SELECT value FROM {self._s}.results WHERE ns = %s AND run_id = %s AND node = %s",
                [self._ns, run_id, node],
            )
        else:
            row = self._one(
                f"SELECT value FROM {self._s}.barriers WHERE ns = %s AND run_id = %s AND parent = %s AND member = %s",
                [self._ns, run_id, *member_of],
            )
        return str(row["value"]) if row is not None else None


def _summary(row: dict[str, Any]) -> RunSummary:
    return RunSummary(
        run_id=row["run_id"],
        pipeline=row["pipeline"],
        state=row["status"],
        created_at_ms=row["created_at"],
        started_at_ms=row["started_at"],
        finished_at_ms=row["finished_at"],
        error=row["error"] or None,
        failed_step=row["failed_step"] or None,
        idempotency_key=row["idempotency_key"] or None,
        correlation_id=row["correlation_id"] or None,
        trace_id=row["trace_id"] or None,
        steps_done=row["done"],
        steps_total=row["total"],
    )
