"""The stall sweep on PostgreSQL: runs kept alive while their steps run, stalled ones re-driven or
failed (``stall.lua``), and local steps whose worker stopped renewing them handed back (``lapsed.lua``).

The index of running runs is a column: ``runs.stall_due``, when the sweep is to look at a run next (its
creation plus its start delay, then its last touch as the sweep last saw it), under a partial index; the
sweep sets it to NULL when it finds the run ended. The index of local steps is the table ``local_steps``:
(run, the step a local step followed) by when its lease would lapse. The sweep's clock (``stall_clock``)
starts again after a gap in sweeping, as ``stall_clock.lua``'s does.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pipelines.store.base import StallCheck, StalledGroup
from pipelines.store.postgres.shared import GOING, NOW_MS, Cursor, Part
from pipelines.store.stall_checks import LAPSE_MARGIN_MS


class RunStalls(Part):
    """``StallChecks`` on PostgreSQL."""

    def keep_alive(self, run_ids: Collection[str]) -> int:
        if not run_ids:
            return 0
        with self._c.connection() as conn:
            cursor = conn.execute(
                f"UPDATE {self._s}.runs SET touched = {NOW_MS} WHERE ns = %s AND run_id = ANY(%s) AND status IN "
                f"('pending', 'running') AND expires_at > {NOW_MS}",
                [self._ns, list(run_ids)],
            )
            return cursor.rowcount

    def sweep_stalled(self, *, stalled_after_ms: int, redrives: int, gap_ms: int, limit: int) -> list[StallCheck]:
        with self._c.transaction() as cur:
            cur.execute(
                f"INSERT INTO {self._s}.stall_clock AS c (ns, seen, resumed) SELECT %s, now, now FROM (SELECT "
                f"{NOW_MS} AS now) t ON CONFLICT (ns) DO UPDATE SET seen = excluded.seen, resumed = CASE WHEN "
                "excluded.seen - c.seen > %s THEN excluded.seen ELSE c.resumed END RETURNING seen AS now, resumed",
                [self._ns, gap_ms],
            )
            clock = cur.fetchone()
            assert clock is not None
            cur.execute(
                f"SELECT run_id FROM {self._s}.runs WHERE ns = %s AND stall_due IS NOT NULL AND stall_due <= %s "
                "ORDER BY stall_due LIMIT %s",
                [self._ns, clock["now"] - stalled_after_ms, limit],
            )
            ids = [row["run_id"] for row in cur.fetchall()]
        checks = []
        for run_id in ids:
            with self._c.transaction() as cur:
                check = self._stall(cur, run_id, stalled_after_ms, redrives, clock["resumed"])
                # Looked at again after its last touch; an ended run leaves the index.
                due = check.touched_ms if check.kind in ("alive", "redrive") else None
                cur.execute(
                    f"UPDATE {self._s}.runs SET stall_due = %s WHERE ns = %s AND run_id = %s", [due, self._ns, run_id]
                )
            checks.append(check)
        return checks

    def _groups(self, cur: Cursor, run_id: str, idle: dict[str, Any]) -> list[StalledGroup]:
        """The groups of ``idle`` steps (id → step row), by where they start; every step to publish again
        must have started there (its start holds what it receives)."""
        cur.execute(
            f"SELECT node, leaves, entries, input FROM {self._s}.starts WHERE ns = %s AND run_id = %s AND input IS "
            "NOT NULL ORDER BY node",
            [self._ns, run_id],
        )
        groups = []
        for start in cur.fetchall():
            found = tuple(node for node in start["entries"] if node in idle)
            if found:
                groups.append(StalledGroup(start["node"], start["leaves"], start["input"], found))
        return groups

    def _stall(self, cur: Cursor, run_id: str, after: int, most: int, resumed: int) -> StallCheck:
        run = self._lock_run(cur, run_id)
        if run is None or run["status"] not in GOING:
            return StallCheck(run_id, "gone")
        now = run["now"]
        touched = max(run["touched"], resumed)
        cur.execute(f"SELECT * FROM {self._s}.steps WHERE ns = %s AND run_id = %s", [self._ns, run_id])
        steps = {step["node"]: step for step in cur.fetchall()}
        for step in steps.values():
            if step["state"] == "running" and step["lease_until"] is not None and step["lease_until"] > touched:
                touched = step["lease_until"]
        if now < touched + after:
            return StallCheck(run_id, "alive", touched_ms=touched)
        waiting = {node: step for node, step in steps.items() if step["state"] in ("pending", "retrying", "running")}
        groups = self._groups(cur, run_id, waiting)
        idle = sorted({node for group in groups for node in group.steps})
        redrives = 0 if run["done"] > run["redrive_done"] else run["redrives"]
        if groups and redrives < most:
            redrives += 1
            # Each re-drive without progress waits twice as long as the one before for the run to move.
            next_touch = now + int(after * (2 ** (redrives - 1) - 1))
            cur.execute(
                f"UPDATE {self._s}.runs SET redrives = %s, redrive_done = done, touched = %s WHERE ns = %s AND "
                "run_id = %s",
                [redrives, next_touch, self._ns, run_id],
            )
            return StallCheck(
                run_id,
                "redrive",
                touched_ms=next_touch,
                pipeline=run["pipeline"],
                correlation_id=run["correlation_id"] or None,
                redrive=redrives,
                groups=tuple(groups),
            )
        why = f"stalled: nothing advanced it for {(now - touched) // 1000} s"
        if not groups:
            why += ", and none of its steps can be published again"
        elif redrives == 0:
            why += " (re-drives are off)"
        else:
            why += f", nor after {redrives} re-drives"
        cur.execute(
            f"UPDATE {self._s}.steps SET state = 'failed', error = %s, finished_at = %s, lease_until = NULL WHERE "
            "ns = %s AND run_id = %s AND node = ANY(%s) AND state = 'running'",
            [why, now, self._ns, run_id, idle],
        )
        named = idle[0] if idle else None
        self._end_run(cur, run_id, now, "failed", error=why, failed_step=named)
        return StallCheck(
            run_id, "failed", pipeline=run["pipeline"], step=named, error=why, created_at_ms=run["created_at"]
        )

    def sweep_lapsed(self, *, lease_ms: int, limit: int) -> list[StallCheck]:
        with self._c.transaction() as cur:
            cur.execute(
                f"SELECT DISTINCT run_id FROM (SELECT run_id FROM {self._s}.local_steps WHERE ns = %s AND due_at <= "
                f"{NOW_MS} ORDER BY due_at LIMIT %s) due ORDER BY run_id",
                [self._ns, limit],
            )
            run_ids = [row["run_id"] for row in cur.fetchall()]
        checks = []
        for run_id in run_ids:
            with self._c.transaction() as cur:
                check = self._lapsed(cur, run_id)
                if check.kind == "gone":
                    cur.execute(f"DELETE FROM {self._s}.local_steps WHERE ns = %s AND run_id = %s", [self._ns, run_id])
                else:  # held: look again when its lease would lapse; re-driven: when the copy's claim would
                    cur.execute(
                        f"UPDATE {self._s}.local_steps SET due_at = %s WHERE ns = %s AND run_id = %s AND due_at <= "
                        f"{NOW_MS}",
                        [
                            (check.touched_ms if check.kind == "alive" else check.touched_ms + lease_ms)
                            + LAPSE_MARGIN_MS,
                            self._ns,
                            run_id,
                        ],
                    )
            checks.append(check)
        return checks

    def _lapsed(self, cur: Cursor, run_id: str) -> StallCheck:
        run = self._lock_run(cur, run_id)
        if run is None or run["status"] not in GOING:
            return StallCheck(run_id, "gone")
        now = run["now"]
        cur.execute(
            f"SELECT node, lease_until FROM {self._s}.steps WHERE ns = %s AND run_id = %s AND state = 'running' AND "
            "claimed_here AND lease_until IS NOT NULL",
            [self._ns, run_id],
        )
        local = cur.fetchall()
        lapsed = {step["node"]: step for step in local if step["lease_until"] <= now}
        held = min((step["lease_until"] for step in local if step["lease_until"] > now), default=None)
        if not lapsed:
            return StallCheck(run_id, "alive", touched_ms=held) if held is not None else StallCheck(run_id, "gone")
        groups = self._groups(cur, run_id, lapsed)
        if not groups:
            return StallCheck(run_id, "alive", touched_ms=now)
        # Its claim stands until another is made: the copy published now claims the step as a retry.
        cur.execute(
            f"UPDATE {self._s}.steps SET state = 'retrying', lease_until = NULL WHERE ns = %s AND run_id = %s AND "
            "node = ANY(%s)",
            [self._ns, run_id, [node for group in groups for node in group.steps]],
        )
        cur.execute(f"UPDATE {self._s}.runs SET touched = %s WHERE ns = %s AND run_id = %s", [now, self._ns, run_id])
        self._notify(cur, run_id)
        return StallCheck(
            run_id,
            "redrive",
            touched_ms=now,
            pipeline=run["pipeline"],
            correlation_id=run["correlation_id"] or None,
            groups=tuple(groups),
        )
