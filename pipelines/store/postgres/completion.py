"""A step's completion on PostgreSQL: its result recorded and what follows decided in one transaction with
the run's row locked, as ``complete.lua`` decides it (read it for the why of each rule): the chain's next
step handed out (or claimed here, for the worker that finished this one), a barrier waited on or released,
the run done; with the attempt's logs kept and its history entry ended (a step claimed here starts one)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from pipelines.errors import DefinitionError
from pipelines.store.base import Advance, LocalOffer
from pipelines.store.postgres.shared import GOING, NOW_MS, Cursor
from pipelines.store.postgres.step_history import CLAIM_ENTRY, StepLogs, appended, end, ended
from pipelines.store.postgres.transactions import HeldStepTransaction
from pipelines.store.roles.transactions import HeldTransaction
from pipelines.store.stall_checks import LAPSE_MARGIN_MS
from pipelines.store.step_history import AttemptLog
from pipelines.store.step_transaction import held
from pipelines.wire.steps import AddressNotInPlan, Frame, frames_json

#: A step failed while it ran, its run ended (cancelled, past its deadline): nothing of the attempt is recorded.
_ENDED_BEFORE = Advance("stopped")


@dataclass(frozen=True)
class _Completion:
    """What a call of ``complete_step`` says: the step, its value (None: a re-drive) and how it ran."""

    run_id: str
    node: str
    up: Sequence[Frame]
    value_json: str | None
    trace_parent: str
    claim: int | None
    local: LocalOffer | None
    worker: str
    logs: AttemptLog | None


@dataclass(frozen=True)
class _Released:
    """The last barrier the step released on its way up: its members' trace parents and how long it waited."""

    links: tuple[str, ...]
    wait_ms: int


class StepCompletion(StepLogs):
    """``RunSteps.complete_step`` on PostgreSQL."""

    def complete_step(
        self,
        run_id: str,
        node: str,
        up: Sequence[Frame],
        value_json: str | None,
        *,
        trace_parent: str = "",
        claim: int | None = None,
        local: LocalOffer | None = None,
        local_after: str | None = None,
        worker: str = "",
        logs: AttemptLog | None = None,
    ) -> Advance:
        call = _Completion(run_id, node, up, value_json, trace_parent, claim, local, worker, logs)
        taken = held()
        if taken is not None:
            return self._complete_held(taken, call, local_after)
        with self._c.transaction() as cur:
            return self._completion(cur, call, local_after)

    def _complete_held(self, taken: HeldTransaction, call: _Completion, local_after: str | None) -> Advance:
        """The completion of a step whose actor wrote in its own transaction (``pipelines.transaction()``):
        decided in that transaction, committed with it when the step's success is recorded, else rolled back
        (its claim lost, its run gone or ended before it): the actor's writes stay only with the success."""
        if not isinstance(taken, HeldStepTransaction) or taken.connections is not self._c:
            taken.rollback()
            raise DefinitionError("A step's transaction was opened on another run store than its completion's.")
        try:
            with taken.cursor() as cur:
                advance = self._completion(cur, call, local_after)
        except BaseException:
            taken.rollback()
            raise
        if advance.kind in ("lost", "missing", "duplicate") or advance is _ENDED_BEFORE:
            taken.rollback()
        else:
            taken.commit()
        return advance

    def _completion(self, cur: Cursor, call: _Completion, local_after: str | None) -> Advance:
        """The completion decided in the transaction ``cur`` is in."""
        if local_after is not None:  # the local step ends: its entry in the index of local steps too
            cur.execute(
                f"DELETE FROM {self._s}.local_steps WHERE ns = %s AND run_id = %s AND after = %s",
                [self._ns, call.run_id, local_after],
            )
        advance = self._complete(cur, call)
        if advance.kind == "local" and call.local is not None:  # in the index before the transaction ends
            cur.execute(
                f"INSERT INTO {self._s}.local_steps (ns, run_id, after, due_at) VALUES (%s, %s, %s, "
                f"{NOW_MS} + %s) ON CONFLICT (ns, run_id, after) DO UPDATE SET due_at = excluded.due_at",
                [self._ns, call.run_id, call.node, call.local.lease_ms + LAPSE_MARGIN_MS],
            )
        return advance

    def _complete(self, cur: Cursor, call: _Completion) -> Advance:
        found = self._recorded(cur, call)
        if isinstance(found, Advance):
            return found
        run, redrive = found
        value = self._value(cur, call, redrive)
        if value is None:
            return Advance("duplicate")
        released = None
        for frame in call.up:
            if frame.kind == "c" and frame.index < frame.count - 1:
                child = f"{frame.node}.{frame.index + 1}"
                return self._continue(cur, call, run, child, value, redrive=redrive, released=released)
            if frame.kind == "p":
                barrier = self._barrier(cur, call, frame, value, redrive=redrive, now=run["now"])
                if isinstance(barrier, Advance):
                    return barrier
                value, released = barrier
        self._end_run(cur, call.run_id, run["now"], "succeeded")
        cur.execute(
            f"UPDATE {self._s}.runs SET result = %s WHERE ns = %s AND run_id = %s", [value, self._ns, call.run_id]
        )
        return Advance(
            "done",
            value_json=value,
            run_created_at_ms=int(run["created_at"]),
            member_trace_parents=released.links if released else (),
            chord_wait_ms=released.wait_ms if released else None,
        )

    def _recorded(self, cur: Cursor, call: _Completion) -> Advance | tuple[dict[str, Any], bool]:
        """The step's success recorded (unless it had succeeded before: a re-drive): the run locked and whether
        this is a re-drive, or why nothing follows."""
        run, step = self._lock_step(cur, call.run_id, call.node)
        if run is None or step is None:
            return Advance("missing")
        if step["up"] is not None and frames_json(call.up) != step["up"]:
            raise AddressNotInPlan(call.run_id, call.node, f"its ancestors are not the plan's {step['up']}")
        self._refuse_unreleased(cur, call.run_id, call.node, step)
        if call.claim is not None and step["attempts"] != call.claim:
            return Advance("lost")
        self._keep_logs(cur, call.run_id, call.node, call.logs)
        redrive = step["state"] == "succeeded"
        if step["state"] == "failed" and run["status"] not in GOING:  # failed while it ran: its run ended
            return _ENDED_BEFORE
        if not redrive:
            if call.value_json is None:
                return Advance("missing")
            self._record(cur, call, run["now"])
        if run["status"] not in GOING:
            return Advance("stopped")
        return run, redrive

    def _record(self, cur: Cursor, call: _Completion, now: int) -> None:
        """The step succeeded."""
        cur.execute(
            f"UPDATE {self._s}.steps SET state = 'succeeded', finished_at = %s, worker = coalesce(nullif(%s, ''), "
            f"worker), lease_until = NULL, error = NULL, history = {ended()} WHERE ns = %s AND run_id = %s AND "
            "node = %s",
            [now, call.worker, end(now, "succeeded"), self._ns, call.run_id, call.node],
        )
        cur.execute(
            f"UPDATE {self._s}.runs SET done = done + 1, touched = %s WHERE ns = %s AND run_id = %s",
            [now, self._ns, call.run_id],
        )
        self._notify(cur, call.run_id)

    def _value(self, cur: Cursor, call: _Completion, redrive: bool) -> str | None:
        """The step's value: the one given, kept with the chain results (a direct member of a parallel node
        keeps it with its barrier), or, on a re-drive, the one kept (None: nothing to re-drive)."""
        first = call.up[0] if call.up else None
        member = first is not None and first.kind == "p"
        if redrive and first is not None and member:
            return self._one_value(
                cur, "barriers", "parent = %s AND member = %s", [call.run_id, first.node, first.index]
            )
        if redrive:
            return self._one_value(cur, "results", "node = %s", [call.run_id, call.node])
        if not member:
            cur.execute(
                f"INSERT INTO {self._s}.results (ns, run_id, node, value) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (ns, run_id, node) DO UPDATE SET value = excluded.value",
                [self._ns, call.run_id, call.node, call.value_json],
            )
        return call.value_json

    def _one_value(self, cur: Cursor, table: str, where: str, values: list[Any]) -> str | None:
        cur.execute(
            f"SELECT value FROM {self._s}.{table} WHERE ns = %s AND run_id = %s AND {where}", [self._ns, *values]
        )
        row = cur.fetchone()
        return str(row["value"]) if row is not None else None

    def _barrier(
        self, cur: Cursor, call: _Completion, frame: Frame, value: str, *, redrive: bool, now: int
    ) -> Advance | tuple[str, _Released]:
        """The step's branch arrives at the barrier of ``frame``'s parallel node: what it waits for, or the
        members' values in order (JSON) once the last one arrived."""
        cur.execute(
            f"INSERT INTO {self._s}.barriers (ns, run_id, parent, member, value, trace_parent, arrived_at) "
            "VALUES (%s, %s, %s, %s, %s, nullif(%s, ''), %s) ON CONFLICT DO NOTHING RETURNING 1",
            [self._ns, call.run_id, frame.node, frame.index, value, call.trace_parent, now],
        )
        if cur.fetchone() is None and not redrive:
            return Advance("duplicate")
        cur.execute(
            f"SELECT value, trace_parent, arrived_at FROM {self._s}.barriers WHERE ns = %s AND run_id = %s AND "
            "parent = %s ORDER BY member",
            [self._ns, call.run_id, frame.node],
        )
        members = cur.fetchall()
        if len(members) < frame.count:
            return Advance("waiting")
        links = tuple(row["trace_parent"] for row in members if row["trace_parent"])
        waited = now - min(row["arrived_at"] for row in members)
        return "[" + ",".join(row["value"] for row in members) + "]", _Released(links, waited)

    def _continue(
        self,
        cur: Cursor,
        call: _Completion,
        run: dict[str, Any],
        child: str,
        value: str,
        *,
        redrive: bool,
        released: _Released | None,
    ) -> Advance:
        """What follows in a chain: the continuation ``child`` handed out with ``value`` (claimed here when
        this worker offered to run it)."""
        now = run["now"]
        cur.execute(
            f"SELECT leaves, entries FROM {self._s}.starts WHERE ns = %s AND run_id = %s AND node = %s",
            [self._ns, call.run_id, child],
        )
        start = cur.fetchone()
        if redrive and start is not None and self._started(cur, call.run_id, start["entries"]):
            return Advance("duplicate")
        if run["deadline_at"] and now > run["deadline_at"]:
            cur.execute(
                f"UPDATE {self._s}.runs SET status = 'failed', error = 'deadline exceeded', failed_step = %s, "
                "finished_at = %s WHERE ns = %s AND run_id = %s",
                [call.node, now, self._ns, call.run_id],
            )
            self._notify(cur, call.run_id)
            return Advance("stopped")
        # What the continuation's steps receive, kept so that the stall sweep can publish them again.
        cur.execute(
            f"UPDATE {self._s}.starts SET input = %s WHERE ns = %s AND run_id = %s AND node = %s",
            [f"[[{value}],{{}}]", self._ns, call.run_id, child],
        )
        leaves = start["leaves"] if start is not None else None
        fields: dict[str, Any] = {
            "node": child,
            "value_json": value,
            "leaves_json": leaves if leaves is not None else "[]",
            "member_trace_parents": released.links if released else (),
            "chord_wait_ms": released.wait_ms if released else None,
        }
        claimed = None if redrive else self._claim_here(cur, call, now, leaves)
        if claimed is not None:
            return Advance("local", claim=claimed, **fields)
        return Advance("start", **fields)

    def _started(self, cur: Cursor, run_id: str, entries: list[str]) -> bool:
        """Whether a continuation started: none of its steps is pending (a re-drive then hands out nothing)."""
        cur.execute(
            f"SELECT 1 FROM {self._s}.steps WHERE ns = %s AND run_id = %s AND node = ANY(%s) AND state = 'pending'",
            [self._ns, run_id, entries],
        )
        return cur.fetchone() is None

    def _claim_here(self, cur: Cursor, call: _Completion, now: int, leaves: str | None) -> int | None:
        """Complete-and-claim: a continuation of one pending step, of an actor the worker offered, is claimed
        for it; its claim, or None."""
        if leaves is None or call.local is None:
            return None
        found = orjson.loads(leaves)
        if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
            return None
        actor, node, options = found[0].get("actor"), found[0].get("node"), found[0].get("options") or {}
        if not isinstance(actor, str) or not isinstance(node, str) or not isinstance(options, dict):
            return None
        if options.get("eta") is not None or f" {actor} " not in call.local.actors:
            return None
        cur.execute(
            f"UPDATE {self._s}.steps SET state = 'running', attempts = attempts + 1, started_at = "
            "coalesce(started_at, %s), lease_until = %s, claimed_here = true, worker = coalesce(nullif(%s, ''), "
            f"worker), history = {appended(CLAIM_ENTRY)} WHERE ns = %s AND run_id = %s AND node = %s AND "
            "state = 'pending' RETURNING attempts",
            [now, now + call.local.lease_ms, call.worker, now, call.worker, self._ns, call.run_id, node],
        )
        row = cur.fetchone()
        return int(row["attempts"]) if row is not None else None
