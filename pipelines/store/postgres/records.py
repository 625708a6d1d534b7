"""The PostgreSQL store's keyed records beside the runs: idempotency keys, once marks, the leases of
long-running jobs, schedule ticks and rate-limit slots (worker processes' records are in
:mod:`~pipelines.store.postgres.workers`). Each decision is one statement
or one transaction, with the meaning of its Lua script (``key_claim.lua``, ``lease_take.lua``,
``tick_sweep.lua``, ``rate_take.lua``, ...). A record past its ``expires_at`` is as good as deleted (the
Redis key's expiry): every read and decision ignores it, and a start deletes such rows now and then."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.store.base import KeyClaimKind, LeaseCheck, LeaseOpenKind, SlotTake
from pipelines.store.postgres.shared import NOW_MS, Cursor, Part


class Records(Part):
    """``KeyClaims``, ``OnceMarks``, ``JobLeases``, ``ScheduleTicks`` and ``RateSlots``."""

    def _now(self, cur: Cursor) -> int:
        cur.execute(f"SELECT {NOW_MS} AS now")
        row = cur.fetchone()
        assert row is not None
        return int(row["now"])

    def _row(self, cur: Cursor, query: str, values: Sequence[Any]) -> dict[str, Any] | None:
        cur.execute(query, values)
        return cur.fetchone()

    def claim_key(self, key: str, *, holder: str, lease_ms: int) -> tuple[KeyClaimKind, int]:
        with self._c.transaction() as cur:
            # The conflicting row is locked whether or not it is taken over: the read after it holds.
            claimed = self._row(
                cur,
                f"INSERT INTO {self._s}.key_claims AS k (ns, key, holder, expires_at) VALUES (%s, %s, %s, "
                f"{NOW_MS} + %s) ON CONFLICT (ns, key) DO UPDATE SET holder = excluded.holder, done = false, "
                f"expires_at = excluded.expires_at WHERE k.expires_at <= {NOW_MS} RETURNING 1",
                [self._ns, key, holder, lease_ms],
            )
            if claimed is not None:
                return "run", 0
            row = self._row(
                cur,
                f"SELECT done, expires_at - {NOW_MS} AS left FROM {self._s}.key_claims WHERE ns = %s AND key = %s",
                [self._ns, key],
            )
            assert row is not None
            return ("done", 0) if row["done"] else ("busy", max(int(row["left"]), 1))

    def finish_key(self, key: str, *, retention_s: int) -> None:
        with self._c.connection() as conn:
            conn.execute(
                f"INSERT INTO {self._s}.key_claims (ns, key, holder, done, expires_at) VALUES (%s, %s, NULL, true, "
                f"{NOW_MS} + %s) ON CONFLICT (ns, key) DO UPDATE SET holder = NULL, done = true, "
                "expires_at = excluded.expires_at",
                [self._ns, key, retention_s * 1000],
            )

    def release_key(self, key: str, *, holder: str) -> None:
        with self._c.connection() as conn:
            conn.execute(
                f"DELETE FROM {self._s}.key_claims WHERE ns = %s AND key = %s AND holder = %s AND NOT done "
                f"AND expires_at > {NOW_MS}",
                [self._ns, key, holder],
            )

    def mark_once(self, key: str, *, retention_s: int) -> bool:
        with self._c.transaction() as cur:
            return (
                self._row(
                    cur,
                    f"INSERT INTO {self._s}.once_marks AS m (ns, key, expires_at) VALUES (%s, %s, {NOW_MS} + %s) "
                    f"ON CONFLICT (ns, key) DO UPDATE SET expires_at = excluded.expires_at WHERE m.expires_at <= "
                    f"{NOW_MS} RETURNING 1",
                    [self._ns, key, retention_s * 1000],
                )
                is not None
            )

    def forget_once(self, key: str) -> None:
        with self._c.connection() as conn:
            conn.execute(f"DELETE FROM {self._s}.once_marks WHERE ns = %s AND key = %s", [self._ns, key])

    def is_marked(self, key: str) -> bool:
        with self._c.transaction() as cur:
            found = self._row(
                cur,
                f"SELECT 1 FROM {self._s}.once_marks WHERE ns = %s AND key = %s AND expires_at > {NOW_MS}",
                [self._ns, key],
            )
            return found is not None

    def open_lease(self, lease_id: str, *, holder: str, lease_ms: int, record: str) -> LeaseOpenKind:
        with self._c.transaction() as cur:
            opened = self._row(
                cur,
                f"INSERT INTO {self._s}.job_leases AS l (ns, lease_id, holder, until_ms, record, ended, expires_at) "
                f"VALUES (%s, %s, %s, {NOW_MS} + %s, %s, false, {NOW_MS} + %s) ON CONFLICT (ns, lease_id) DO UPDATE "
                "SET holder = excluded.holder, until_ms = excluded.until_ms, record = excluded.record, ended = false, "
                f"expires_at = excluded.expires_at WHERE l.expires_at <= {NOW_MS} RETURNING 1",
                [self._ns, lease_id, holder, lease_ms, record, self._retention_ms],
            )
            if opened is not None:
                return "opened"
            row = self._row(
                cur, f"SELECT ended FROM {self._s}.job_leases WHERE ns = %s AND lease_id = %s", [self._ns, lease_id]
            )
            return "ended" if row is not None and row["ended"] else "open"

    def renew_leases(self, holders: Mapping[str, str], *, lease_ms: int) -> list[str]:
        if not holders:
            return []
        taken: list[str] = []
        with self._c.transaction() as cur:
            for lease_id in sorted(holders):
                row = self._row(
                    cur,
                    f"SELECT holder FROM {self._s}.job_leases WHERE ns = %s AND lease_id = %s AND expires_at > "
                    f"{NOW_MS} FOR UPDATE",
                    [self._ns, lease_id],
                )
                if row is None or row["holder"] is None:  # unknown, or closed meanwhile: neither
                    continue
                if row["holder"] != holders[lease_id]:
                    taken.append(lease_id)
                    continue
                cur.execute(
                    f"UPDATE {self._s}.job_leases SET until_ms = {NOW_MS} + %s WHERE ns = %s AND lease_id = %s",
                    [lease_ms, self._ns, lease_id],
                )
        return [lease_id for lease_id in holders if lease_id in taken]

    def close_lease(self, lease_id: str) -> None:
        with self._c.connection() as conn:
            conn.execute(
                f"UPDATE {self._s}.job_leases SET holder = NULL, until_ms = NULL, record = NULL, ended = true "
                f"WHERE ns = %s AND lease_id = %s AND expires_at > {NOW_MS}",
                [self._ns, lease_id],
            )

    def take_expired_lease(self, lease_id: str) -> LeaseCheck:
        with self._c.transaction() as cur:
            row = self._row(
                cur,
                f"SELECT until_ms - {NOW_MS} AS left, record FROM {self._s}.job_leases WHERE ns = %s AND "
                f"lease_id = %s AND expires_at > {NOW_MS} AND until_ms IS NOT NULL FOR UPDATE",
                [self._ns, lease_id],
            )
            if row is None:
                return LeaseCheck("gone")
            if row["left"] > 0:
                return LeaseCheck("alive", wait_ms=int(row["left"]))
            # Kept, held by the watchdog: no copy of the job's message runs it, and its holder learns it.
            cur.execute(
                f"UPDATE {self._s}.job_leases SET until_ms = NULL, record = NULL, holder = 'watchdog' WHERE ns = %s "
                "AND lease_id = %s",
                [self._ns, lease_id],
            )
            return LeaseCheck("expired", record=row["record"])

    def claim_tick(self, job: str, tick_ms: int, *, retention_s: int) -> bool:
        with self._c.transaction() as cur:
            row = self._row(
                cur,
                f"INSERT INTO {self._s}.ticks AS t (ns, job, tick, claims, expires_at) VALUES (%s, %s, %s, 1, "
                f"{NOW_MS} + %s) ON CONFLICT (ns, job, tick) DO UPDATE SET claims = CASE WHEN t.expires_at <= "
                f"{NOW_MS} THEN 1 ELSE t.claims + 1 END, expires_at = excluded.expires_at RETURNING claims",
                [self._ns, job, tick_ms, retention_s * 1000],
            )
            if row is None or row["claims"] > 1:
                return False
            # The job's first claim starts its sweeps for missed ticks there.
            cur.execute(
                f"INSERT INTO {self._s}.schedules AS j (ns, job, last_tick, swept_through) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (ns, job) DO UPDATE SET last_tick = greatest(j.last_tick, excluded.last_tick), "
                "swept_through = coalesce(j.swept_through, excluded.swept_through)",
                [self._ns, job, tick_ms, tick_ms],
            )
            return True

    def _schedule(self, job: str, column: str) -> int | None:
        with self._c.transaction() as cur:
            row = self._row(
                cur, f"SELECT {column} AS value FROM {self._s}.schedules WHERE ns = %s AND job = %s", [self._ns, job]
            )
        return int(row["value"]) if row is not None and row["value"] is not None else None

    def last_tick(self, job: str) -> int | None:
        return self._schedule(job, "last_tick")

    def swept_through(self, job: str) -> int | None:
        return self._schedule(job, "swept_through")

    def tick_claims(self, job: str, tick_ms: int) -> int:
        with self._c.transaction() as cur:
            row = self._row(
                cur,
                f"SELECT claims FROM {self._s}.ticks WHERE ns = %s AND job = %s AND tick = %s AND expires_at > "
                f"{NOW_MS}",
                [self._ns, job, tick_ms],
            )
        return int(row["claims"]) if row is not None else 0

    def sweep_ticks(self, job: str, ticks: Sequence[int], *, cutoff_ms: int, through_ms: int) -> list[int]:
        with self._c.transaction() as cur:
            row = self._row(
                cur,
                f"SELECT swept_through FROM {self._s}.schedules WHERE ns = %s AND job = %s FOR UPDATE",
                [self._ns, job],
            )
            if row is None or row["swept_through"] is None:
                return []
            mark = int(row["swept_through"])
            cur.execute(
                f"SELECT tick FROM {self._s}.ticks WHERE ns = %s AND job = %s AND tick = ANY(%s) AND expires_at > "
                f"{NOW_MS}",
                [self._ns, job, list(ticks)],
            )
            claimed = {int(found["tick"]) for found in cur.fetchall()}
            missed: list[int] = []
            open_run = False
            for tick in ticks:
                if tick <= mark:
                    continue
                if tick > cutoff_ms:
                    if open_run and tick not in claimed:  # the run of missed ticks may go on: swept whole later
                        self._mark(cur, job, missed[0] - 1)
                        return []
                    break
                if tick in claimed:
                    open_run = False
                else:
                    missed.append(tick)
                    open_run = True
            if through_ms > mark:
                self._mark(cur, job, through_ms)
            return missed

    def _mark(self, cur: Cursor, job: str, through_ms: int) -> None:
        cur.execute(
            f"UPDATE {self._s}.schedules SET swept_through = %s WHERE ns = %s AND job = %s", [through_ms, self._ns, job]
        )

    def _rate(self, cur: Cursor, key: str) -> dict[str, Any]:
        """The limit's row, locked, with the store's time; its next free slot and runs as of now."""
        cur.execute(
            f"INSERT INTO {self._s}.rate_limits (ns, key) VALUES (%s, %s) ON CONFLICT DO NOTHING", [self._ns, key]
        )
        row = self._row(
            cur,
            f"SELECT {NOW_MS} AS now, * FROM {self._s}.rate_limits WHERE ns = %s AND key = %s FOR UPDATE",
            [self._ns, key],
        )
        assert row is not None
        now = row["now"]
        return {
            "now": now,
            "next_free": row["next_free"] if row["next_free_expires"] > now else 0,
            "runs": list(row["runs"]) if row["runs_expire"] > now else [],
        }

    def _set_rate(self, cur: Cursor, key: str, **changes: int | list[int]) -> None:
        cur.execute(
            f"UPDATE {self._s}.rate_limits SET {', '.join(f'{name} = %s' for name in changes)} "
            "WHERE ns = %s AND key = %s",
            [*changes.values(), self._ns, key],
        )

    def reserve_slots(self, key: str, *, count: int, interval_ms: int) -> list[int]:
        with self._c.transaction() as cur:
            limit = self._rate(cur, key)
            now = limit["now"]
            tat = max(limit["next_free"], now)
            delays = []
            for _ in range(count):
                delays.append(tat - now)
                tat += interval_ms
            self._set_rate(cur, key, next_free=tat, next_free_expires=tat + interval_ms)
            return delays

    def take_slot(
        self, key: str, *, interval_ms: int, window_count: int, window_ms: int, held_ms: int, grace_ms: int
    ) -> SlotTake:
        with self._c.transaction() as cur:
            limit = self._rate(cur, key)
            now, runs = limit["now"], limit["runs"]
            tat = max(limit["next_free"], now)
            free_at = now  # the hard bound: at most window_count runs in any window ending now
            if len(runs) >= window_count:
                free_at = max(now, runs[window_count - 1] + window_ms)
            holds = held_ms > 0 and abs(now - held_ms) <= grace_ms
            if free_at <= now and (holds or tat <= now):
                changes: dict[str, Any] = {
                    "runs": [now, *runs][:window_count],
                    "runs_expire": now + window_ms + grace_ms,
                }
                if not holds:
                    changes |= {"next_free": now + interval_ms, "next_free_expires": now + interval_ms + grace_ms}
                self._set_rate(cur, key, **changes)
                return SlotTake(wait_ms=0, slot_ms=now)
            if holds:  # its slot is due but the window is full: it waits for the window alone
                slot = free_at
            else:
                slot = max(tat, free_at)
                self._set_rate(cur, key, next_free=slot + interval_ms, next_free_expires=slot + interval_ms + grace_ms)
            return SlotTake(wait_ms=slot - now, slot_ms=slot)
