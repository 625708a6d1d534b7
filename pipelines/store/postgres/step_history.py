"""A step's history and its attempts' log records on PostgreSQL, as the Redis store's scripts keep them
(:mod:`pipelines.store.step_history`).

The history is the step row's ``history`` (jsonb: the entries the scripts keep in ``h``, in their shape),
changed in the statement that changes the step: a claim appends its attempt (:func:`appended`), a
completion, failure or deadline ends the latest entry when it is the current attempt's and still open
(:func:`ended`; a failed attempt another claim overtook ends its own, :func:`ended_attempt`), a replay
appends its reason. The logs are a row per step (``step_logs``: its attempts'
logs as ``step_logs.lua`` keeps them), written in the transaction that records the attempt's end, and
deleted with the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from psycopg.types.json import Jsonb

from pipelines.store.postgres.shared import NOW_MS, Cursor, Part
from pipelines.store.step_history import HISTORY_ENTRIES, HISTORY_ERROR_CHARS, AttemptLog, attempt_logs

#: SQL: a claim's history entry, of the attempt the claim starts (``attempts`` before it counts it); its
#: values: when (epoch ms) and the worker ('' for none).
CLAIM_ENTRY = "jsonb_strip_nulls(jsonb_build_object('n', attempts + 1, 'a', %s::bigint, 'w', nullif(%s::text, '')))"
#: SQL: a replay's history entry; its values: why, and when (epoch ms).
REPLAY_ENTRY = "jsonb_build_object('r', %s::text, 'a', %s::bigint)"


def appended(entry: str) -> str:
    """SQL: the step's ``history`` with ``entry`` (a jsonb expression) appended, the latest
    :data:`~pipelines.store.step_history.HISTORY_ENTRIES` kept."""
    return (
        f"(SELECT jsonb_agg(e ORDER BY i) FROM jsonb_array_elements(history || jsonb_build_array({entry})) "
        f"WITH ORDINALITY AS t(e, i) WHERE i > jsonb_array_length(history) + 1 - {HISTORY_ENTRIES})"
    )


def ended() -> str:
    """SQL: the step's ``history`` with its latest entry ended (its value: a :func:`end`), when that entry is
    the current attempt's and has no outcome yet."""
    return (
        "CASE WHEN (history -> -1 ->> 'n')::integer = attempts AND NOT (history -> -1) ? 'o' "
        "THEN jsonb_set(history, '{-1}', (history -> -1) || %s::jsonb) ELSE history END"
    )


def ended_attempt() -> str:
    """SQL: the step's ``history`` with the entry of one attempt (its value: the attempt's number) ended (its
    value: a :func:`end`), when it has no outcome yet: a failed attempt another claim overtook."""
    return (
        "COALESCE((SELECT jsonb_agg(CASE WHEN (e ->> 'n')::integer = %s AND NOT e ? 'o' THEN e || %s::jsonb "
        "ELSE e END ORDER BY i) FROM jsonb_array_elements(history) WITH ORDINALITY AS t(e, i)), history)"
    )


def end(now: int, outcome: str, error: str | None = None) -> Jsonb:
    """What ends an attempt's entry: when (epoch ms), its outcome, and a failure's error (cut short)."""
    fields: dict[str, Any] = {"b": now, "o": outcome}
    if error is not None:
        fields["e"] = error[:HISTORY_ERROR_CHARS]
    return Jsonb(fields)


def kept_logs(old: str | None, new: AttemptLog, *, records: int, size: int) -> str:
    """A step's attempts' logs with ``new`` added: the newest attempts whole while they fit ``records`` and
    ``size`` (bytes), the newest always (its worker bounded it already); old logs that cannot be read are
    replaced, as ``step_logs.lua`` does."""
    blocks = _readable(old)
    # In attempt order: a failed attempt its retry overtook keeps its logs before the retry's.
    at = len(blocks)
    while at > 0 and int(blocks[at - 1].get("n", 0)) > new.attempt:
        at -= 1
    blocks.insert(at, orjson.loads(new.to_json()))
    total_records = total_size = 0
    first = len(blocks) - 1
    for i in range(len(blocks) - 1, -1, -1):
        total_records, total_size = total_records + blocks[i]["c"], total_size + blocks[i]["s"]
        if i < len(blocks) - 1 and (total_records > records or total_size > size):
            break
        first = i
    return orjson.dumps(blocks[first:]).decode()


def _readable(raw: str | None) -> list[dict[str, Any]]:
    """The attempts' logs kept as ``raw``, or none when it cannot be read."""
    try:
        blocks = orjson.loads(raw or "[]")
    except orjson.JSONDecodeError:
        return []
    readable = isinstance(blocks, list) and all(
        isinstance(block, dict) and isinstance(block.get("c"), int) and isinstance(block.get("s"), int)
        for block in blocks
    )
    return blocks if readable else []


class StepLogs(Part):
    """``StepLogs`` on PostgreSQL, and the keeping of an attempt's logs for the decisions that end it."""

    def _keep_logs(self, cur: Cursor, run_id: str, node: str, logs: AttemptLog | None) -> None:
        """Keep what the attempt logged with the step (in the caller's transaction, the run's row locked and
        the attempt's claim checked)."""
        if logs is None or not logs.records or self._log_bounds[0] == 0:
            return
        cur.execute(
            f"SELECT logs FROM {self._s}.step_logs WHERE ns = %s AND run_id = %s AND node = %s",
            [self._ns, run_id, node],
        )
        row = cur.fetchone()
        kept = kept_logs(row["logs"] if row else None, logs, records=self._log_bounds[0], size=self._log_bounds[1])
        cur.execute(
            f"INSERT INTO {self._s}.step_logs (ns, run_id, node, logs) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (ns, run_id, node) DO UPDATE SET logs = excluded.logs",
            [self._ns, run_id, node, kept],
        )

    def step_logs(self, run_id: str, nodes: Sequence[str]) -> dict[str, tuple[AttemptLog, ...]]:
        if not nodes:
            return {}
        with self._c.transaction() as cur:
            cur.execute(
                f"SELECT l.node, l.logs FROM {self._s}.step_logs l JOIN {self._s}.runs r ON r.ns = l.ns AND "
                f"r.run_id = l.run_id WHERE l.ns = %s AND l.run_id = %s AND l.node = ANY(%s) AND "
                f"r.expires_at > {NOW_MS}",
                [self._ns, run_id, list(nodes)],
            )
            found = {row["node"]: row["logs"] for row in cur.fetchall()}
        return {node: attempt_logs(found[node]) for node in nodes if node in found}
