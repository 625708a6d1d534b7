"""What worker processes record in the PostgreSQL store: their heartbeats and their message counts.

A heartbeat is a row per process (``workers``), kept ``keep_ms`` after its beat. A minute's message
counts (:mod:`pipelines.store.counts`) are a row of the minute (``count_minutes``: until when it is kept,
as the Redis store's hash of the minute expires) and a row per actor (``counts``: a column per measure),
added to in one transaction per process's report, as ``counts_add.lua`` adds: the slowest keeps the
largest, the other measures add up. A minute past its keeping counts as none, and starts again from zero
when counted again; a start deletes such minutes now and then, with the runs past their retention.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipelines.store.base import WorkerBeat
from pipelines.store.counts import ActorCounts, MinuteCounts, minute_of, minutes_between
from pipelines.store.postgres.shared import NOW_MS, Part


class WorkerRecords(Part):
    """``WorkerBeats`` and ``MessageCounts`` on PostgreSQL."""

    def beat(self, worker: WorkerBeat, *, keep_ms: int) -> None:
        with self._c.connection() as conn:
            conn.execute(
                f"INSERT INTO {self._s}.workers (ns, worker_id, beat, beat_at, expires_at) VALUES (%s, %s, %s, %s, "
                f"{NOW_MS} + %s) ON CONFLICT (ns, worker_id) DO UPDATE SET beat = excluded.beat, beat_at = "
                "excluded.beat_at, expires_at = excluded.expires_at",
                [self._ns, worker.worker_id, worker.to_json().decode(), worker.beat_at_ms, keep_ms],
            )

    def forget_worker(self, worker_id: str) -> None:
        with self._c.connection() as conn:
            conn.execute(f"DELETE FROM {self._s}.workers WHERE ns = %s AND worker_id = %s", [self._ns, worker_id])

    def worker_beats(self) -> list[WorkerBeat]:
        with self._c.transaction() as cur:
            cur.execute(
                f"SELECT beat FROM {self._s}.workers WHERE ns = %s AND expires_at > {NOW_MS} "
                "ORDER BY beat_at DESC, worker_id DESC",
                [self._ns],
            )
            return [WorkerBeat.from_json(row["beat"]) for row in cur.fetchall()]

    def add_counts(self, minutes: Mapping[int, Mapping[str, ActorCounts]], *, keep_ms: int) -> None:
        added: dict[int, dict[str, ActorCounts]] = {}
        for minute_ms, actors in minutes.items():
            for actor, counts in actors.items():
                if counts.fields(actor):  # an actor that did nothing leaves no row, as it leaves no field
                    found = added.setdefault(minute_of(minute_ms), {})
                    found[actor] = found.get(actor, ActorCounts()) + counts
        if not added:
            return
        ordered = sorted(added)  # minutes locked in one order: two reports at once never wait on each other
        with self._c.transaction() as cur:
            cur.execute(
                f"DELETE FROM {self._s}.count_minutes WHERE ns = %s AND minute = ANY(%s) AND expires_at <= {NOW_MS}",
                [self._ns, ordered],
            )
            cur.executemany(
                f"INSERT INTO {self._s}.count_minutes (ns, minute, expires_at) VALUES (%s, %s, {NOW_MS} + %s) "
                "ON CONFLICT (ns, minute) DO UPDATE SET expires_at = excluded.expires_at",
                [(self._ns, minute_ms, keep_ms) for minute_ms in ordered],
            )
            cur.executemany(
                f"INSERT INTO {self._s}.counts AS c (ns, minute, actor, processed, failed, dead, ms, slowest) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (ns, minute, actor) DO UPDATE SET processed = "
                "c.processed + excluded.processed, failed = c.failed + excluded.failed, dead = c.dead + "
                "excluded.dead, ms = c.ms + excluded.ms, slowest = greatest(c.slowest, excluded.slowest)",
                [
                    (self._ns, minute_ms, actor, c.processed, c.failed, c.dead_lettered, c.total_ms, c.slowest_ms)
                    for minute_ms in ordered
                    for actor, c in sorted(added[minute_ms].items())
                ],
            )

    def message_counts(self, from_ms: int, to_ms: int) -> list[MinuteCounts]:
        minutes = minutes_between(from_ms, to_ms)
        with self._c.transaction() as cur:
            cur.execute(
                f"SELECT c.* FROM {self._s}.counts c JOIN {self._s}.count_minutes m ON m.ns = c.ns AND m.minute = "
                f"c.minute WHERE c.ns = %s AND c.minute BETWEEN %s AND %s AND m.expires_at > {NOW_MS} "
                "ORDER BY c.minute, c.actor",
                [self._ns, minutes[0], minutes[-1]],
            )
            rows = cur.fetchall()
        found: dict[int, dict[str, ActorCounts]] = {}
        for row in rows:
            counts = ActorCounts(row["processed"], row["failed"], row["dead"], row["ms"], row["slowest"])
            found.setdefault(row["minute"], {})[row["actor"]] = counts
        return [MinuteCounts(minute_ms, found.get(minute_ms, {})) for minute_ms in minutes]
