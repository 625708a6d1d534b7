"""RunViews.find_runs, on every backend: every retained run found by state, pipeline, time or key, paged."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace

import psycopg
import pytest

from pipelines.errors import InvalidQuery
from pipelines.store import NewRun, RedisRunStore, RunStore, embedded_store, index, replies
from pipelines.store.base import RunQuery
from pipelines.store.postgres import PostgresRunStore
from pipelines.wire.steps import Frame
from tests.support.backends import STORE_KINDS, schema_of
from tests.support.housekeeping import delete_store, fresh_namespace

NewChord = Callable[..., NewRun]
LEASE_MS = 60_000


def _ids(store: RunStore, query: RunQuery, limit: int = 100) -> list[str]:
    return [run.run_id for run in store.find_runs(query, limit=limit).runs]


def _started(store: RunStore, new_chord: NewChord, count: int, pipeline: str = "chord") -> list[NewRun]:
    # Ids ascending in creation order, so runs created within one millisecond still sort newest first.
    prefix = uuid.uuid4().hex
    runs = [replace(new_chord(1), run_id=f"{prefix}-{i:03}", pipeline=pipeline) for i in range(count)]
    for run in runs:
        store.create_run(run)
    return runs


def test_find_runs_lists_every_run_newest_first_with_its_record_and_step_counts(
    store: RunStore, new_chord: NewChord
) -> None:
    assert store.find_runs(RunQuery(), limit=10).runs == ()
    keyed = new_chord(3, key="order-9", correlation_id="corr-9", trace_id="cd" * 16)
    store.create_run(keyed)
    store.claim_step(keyed.run_id, "0.0.1", attempt=1, lease_ms=LEASE_MS)
    store.complete_step(keyed.run_id, "0.0.1", [Frame("p", "0.0", 1, 3), Frame("c", "0", 0, 2)], "1")
    time.sleep(0.002)  # the others in a later millisecond: the keyed run's id (its key's) decides no tie
    others = _started(store, new_chord, 2)

    page = store.find_runs(RunQuery(), limit=10)

    assert [run.run_id for run in page.runs] == [others[1].run_id, others[0].run_id, keyed.run_id]
    assert page.cursor is None
    found = page.runs[2]
    assert (found.pipeline, found.state, found.idempotency_key) == ("chord", "running", "order-9")
    assert (found.correlation_id, found.trace_id) == ("corr-9", "cd" * 16)
    assert (found.steps_done, found.steps_total) == (1, 4)
    assert found.created_at_ms > 0
    assert found.started_at_ms is not None
    assert found.finished_at_ms is None


def test_find_runs_filters_by_state_as_runs_move_between_states(store: RunStore, new_chord: NewChord) -> None:
    pending, running, cancelled, failed = _started(store, new_chord, 4)
    store.claim_step(running.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    store.cancel_run(cancelled.run_id)
    store.claim_step(failed.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    store.fail_step(failed.run_id, "0.0.0", "ValueError: boom", final=True)

    assert _ids(store, RunQuery(state="pending")) == [pending.run_id]
    assert _ids(store, RunQuery(state="running")) == [running.run_id]
    assert _ids(store, RunQuery(state="cancelled")) == [cancelled.run_id]
    assert _ids(store, RunQuery(state="failed")) == [failed.run_id]
    assert store.find_runs(RunQuery(state="failed"), limit=1).runs[0].error == "ValueError: boom"

    store.reopen_step(failed.run_id, "0.0.0")
    assert _ids(store, RunQuery(state="failed")) == []
    assert _ids(store, RunQuery(state="running")) == [failed.run_id, running.run_id]
    store.claim_step(failed.run_id, "0.0.0", attempt=2, lease_ms=LEASE_MS)
    store.complete_step(failed.run_id, "0.0.0", [Frame("p", "0.0", 0, 1), Frame("c", "0", 0, 2)], "1")
    store.claim_step(failed.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    store.complete_step(failed.run_id, "0.1", [Frame("c", "0", 1, 2)], "2")
    assert _ids(store, RunQuery(state="succeeded")) == [failed.run_id]
    assert _ids(store, RunQuery(state="running")) == [running.run_id]


def test_find_runs_filters_by_pipeline_time_and_key_and_combines_filters(store: RunStore, new_chord: NewChord) -> None:
    chords = _started(store, new_chord, 2)
    reports = _started(store, new_chord, 2, pipeline="report")
    store.claim_step(reports[0].run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    keyed = replace(new_chord(1, key="invoice-4"), pipeline="report")
    time.sleep(0.002)  # a millisecond after the others: the keyed run's id (its key's) decides no tie
    store.create_run(keyed)
    before = int(time.time() * 1000) - 60_000

    assert _ids(store, RunQuery(pipeline="chord")) == [chords[1].run_id, chords[0].run_id]
    assert _ids(store, RunQuery(pipeline="report", state="running")) == [reports[0].run_id]
    assert _ids(store, RunQuery(state="pending", pipeline="chord")) == [chords[1].run_id, chords[0].run_id]
    assert _ids(store, RunQuery(pipeline="none-such")) == []
    assert _ids(store, RunQuery(since_ms=before))[0] == keyed.run_id
    assert _ids(store, RunQuery(since_ms=before + 120_000)) == []
    assert _ids(store, RunQuery(until_ms=before)) == []
    assert _ids(store, RunQuery(key="invoice-4")) == [keyed.run_id]
    assert _ids(store, RunQuery(key="invoice-4", state="failed")) == []
    assert _ids(store, RunQuery(key="no-such-key")) == []


def test_find_runs_pages_through_runs_created_in_the_same_millisecond_without_gaps_or_repeats(
    store: RunStore, new_chord: NewChord
) -> None:
    runs = _started(store, new_chord, 7)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.find_runs(RunQuery(), limit=3, cursor=cursor)
        seen += [run.run_id for run in page.runs]
        pages += 1
        if page.cursor is None:
            break
        cursor = page.cursor

    assert seen == [run.run_id for run in reversed(runs)]
    assert pages == 3
    with pytest.raises(InvalidQuery, match="not a cursor"):
        store.find_runs(RunQuery(), limit=3, cursor="page-2")


def short_lived(kind: str, namespace: str) -> RunStore:
    """A store of ``kind`` whose runs are kept one second (config.toml allows 60 s at least), so that a test
    waits a second, not a minute."""
    if kind == "memory":
        return embedded_store(namespace=namespace, retention_s=1)
    if STORE_KINDS[kind].schema_per_namespace:
        return PostgresRunStore(
            url=STORE_KINDS[kind].url, namespace=namespace, retention_s=1, schema=schema_of(namespace)
        )
    return RedisRunStore(url=STORE_KINDS[kind].url, namespace=namespace, retention_s=1)


def indexed(store: RunStore) -> set[str]:
    """The runs the store's index of runs holds, retained or not."""
    if isinstance(store, PostgresRunStore):
        with psycopg.connect(store._c.url) as conn:
            rows = conn.execute(f"SELECT run_id FROM {store._c.s}.runs WHERE ns = %s", [store._ns]).fetchall()
        return {run_id for (run_id,) in rows}
    assert isinstance(store, RedisRunStore)
    indexes = list(store._redis.scan_iter(match=f"{store._namespace}:runs*"))  # every shard of a cluster
    return {replies.text(member) for index in indexes for member in store._redis.zrange(index, 0, -1)}


def test_the_index_drops_runs_created_more_than_a_retention_ago(store_backend: str, new_chord: NewChord) -> None:
    short = short_lived(store_backend, fresh_namespace())
    try:
        old = new_chord(1)
        short.create_run(old)
        short.cancel_run(old.run_id)
        deadline = time.monotonic() + 30
        while short.run_state(old.run_id) is not None:
            assert time.monotonic() < deadline, "the run outlived its retention"
            time.sleep(0.05)

        new = new_chord(1)
        short.create_run(new)

        assert [run.run_id for run in short.find_runs(RunQuery(), limit=10).runs] == [new.run_id]
        assert indexed(short) == {new.run_id}
    finally:
        delete_store(short)
        short.close()


def test_a_state_no_recent_run_is_in_ends_a_page_after_a_bounded_read_with_a_cursor_to_read_on(
    script_store: RedisRunStore, new_chord: NewChord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One request reads at most FIND_RUNS_MOST_READ index entries, however rare the state asked for (a
    PostgreSQL store's page is one query on an index of the states: it needs no such bound)."""
    store = script_store
    monkeypatch.setattr(index, "FIND_RUNS_SLICE", 4)
    monkeypatch.setattr(index, "FIND_RUNS_MOST_READ", 8)
    [cancelled, *_newer] = _started(store, new_chord, 21)
    store.cancel_run(cancelled.run_id)
    query = RunQuery(state="cancelled")

    pages = [store.find_runs(query, limit=5)]
    while pages[-1].cursor is not None:
        pages.append(store.find_runs(query, limit=5, cursor=pages[-1].cursor))

    assert [len(page.runs) for page in pages] == [0, 0, 1]
    assert pages[-1].runs[0].run_id == cancelled.run_id
