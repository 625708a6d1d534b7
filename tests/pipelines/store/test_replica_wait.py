"""Waiting for replicas (``store.wait_for_replicas``) on a Redis primary with one replica, both started
here: which writes are followed by ``WAIT`` (counted by the primary itself, ``INFO commandstats``), that
each is on its replica when the call returns, and what a replica that does not answer costs: the call
returns after ``replica_wait_ms``, the write stands on the primary, and it is counted and logged.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import orjson
import pytest

from pipelines.config.sections import StoreConfig
from pipelines.store import NewRun, RedisRunStore, make_store
from pipelines.store.replica_wait import ReplicaWait
from pipelines.store.waited_sends import send_waiting
from pipelines.wire.naming import run_key
from pipelines.wire.steps import Frame
from tests.support.housekeeping import fresh_namespace
from tests.support.redis_servers import Server

NewChord = Callable[..., NewRun]
#: The wait of a store whose replica is stopped: what it costs is asserted.
WAIT_MS = 300
#: The wait of a store whose replica is well: WAIT returns as soon as it acknowledges, so a generous
#: limit costs nothing, and a replica slowed by a busy machine is not counted short.
PATIENT_WAIT_MS = 10_000
LEASE_MS = 60_000


@pytest.fixture(scope="module")
def primary_and_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    directory = tmp_path_factory.mktemp("replica_wait")
    primary = Server(directory / "primary", "--repl-diskless-sync-delay", "0")  # the replica syncs at once
    replica = Server(directory / "replica", "--replicaof", "127.0.0.1", str(primary.port))
    replica.await_condition(lambda: replica.client.info("replication")["master_link_status"] == "up", "in sync")
    yield primary, replica
    replica.stop()
    primary.stop()


@pytest.fixture
def primary(primary_and_replica: tuple[Server, Server]) -> Server:
    return primary_and_replica[0]


@pytest.fixture
def replica(primary_and_replica: tuple[Server, Server]) -> Server:
    return primary_and_replica[1]


def _waiting_store(primary: Server, namespace: str, wait_ms: int) -> Iterator[RedisRunStore]:
    config = StoreConfig(url=primary.url, retention_s=3600, wait_for_replicas=1, replica_wait_ms=wait_ms)
    store = make_store(config, namespace=namespace)
    assert isinstance(store, RedisRunStore)
    yield store
    store.delete_namespace()
    store.close()


@pytest.fixture
def waiting_store(primary: Server, store_namespace: str) -> Iterator[RedisRunStore]:
    """A store on the primary that waits for its one replica, up to ``PATIENT_WAIT_MS``."""
    yield from _waiting_store(primary, store_namespace, PATIENT_WAIT_MS)


@pytest.fixture
def impatient_store(primary: Server, store_namespace: str) -> Iterator[RedisRunStore]:
    """A store on the primary that waits for its one replica up to ``WAIT_MS`` (300 ms)."""
    yield from _waiting_store(primary, store_namespace, WAIT_MS)


@pytest.fixture
def stopped_replica(replica: Server) -> Iterator[Server]:
    """The replica, SIGSTOPped (it keeps its link but acknowledges nothing) until the test ends."""
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        yield replica
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)


def _step_state(server: Server, namespace: str, run: NewRun, node: str) -> str:
    """A step's state as ``server`` has it ("" when it has not the step)."""
    raw = server.client.hget(f"{run_key(namespace, run.run_id)}:steps", node)
    return "" if raw is None else str(orjson.loads(raw)["s"])


def test_creation_completion_failure_cancel_and_key_done_wait_for_the_replica_and_claims_do_not(
    waiting_store: RedisRunStore, primary: Server, replica: Server, new_chord: NewChord, store_namespace: str
) -> None:
    run, other = new_chord(2), new_chord(1)
    waiting_store.create_run(new_chord(1))  # loads the scripts (a pipeline that met NOSCRIPT goes twice)
    before = primary.waits()

    waiting_store.create_runs([run, other])
    assert replica.client.exists(run_key(store_namespace, run.run_id))
    assert primary.waits() - before == 1  # one WAIT for the batch

    assert waiting_store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS).kind == "run"
    assert primary.waits() - before == 1  # a claim does not wait: a lost one only lets a step run again

    waiting_store.complete_step(run.run_id, "0.0.0", [Frame("p", "0.0", 0, 2), Frame("c", "0", 0, 2)], "1")
    assert _step_state(replica, store_namespace, run, "0.0.0") == "succeeded"
    waiting_store.fail_step(run.run_id, "0.0.1", "boom", final=True)
    waiting_store.cancel_run(other.run_id)
    assert primary.waits() - before == 4
    waiting_store.finish_key(f"order-{run.run_id}", retention_s=60)  # a keyed message's key recorded done
    assert primary.waits() - before == 5
    assert waiting_store.claim_key(f"order-{run.run_id}", holder="h", lease_ms=LEASE_MS)[0] == "done"
    assert waiting_store.replica_wait is not None
    assert waiting_store.replica_wait.short == 0


def test_calls_that_met_lost_scripts_run_once_and_wait_again_after_running(
    waiting_store: RedisRunStore, primary: Server, new_chord: NewChord, store_namespace: str
) -> None:
    runs = [new_chord(1) for _ in range(4)]
    waiting_store.create_runs(runs)
    claim = waiting_store._claim
    calls = [([run_key(store_namespace, run.run_id)], ["0.0.0", 60_000, 1]) for run in runs]
    connection = waiting_store._scripts._own_client()
    assert connection is not None
    assert waiting_store.replica_wait is not None

    primary.client.script_flush()  # what a restart without persistence leaves
    before = primary.waits()
    together = waiting_store._scripts._run_together([(claim, keys, args, True) for keys, args in calls[:2]])
    # The shared send's WAIT came before the scripts ran again: it waits once more after them.
    assert primary.waits() - before == 2
    assert [reply[0] for reply in together] == [b"run", b"run"]

    primary.client.script_flush()
    before = primary.waits()
    alone = send_waiting(waiting_store.replica_wait, connection, claim, calls[2:])
    assert primary.waits() - before == 2  # the send that met NOSCRIPT (nothing ran), then the one that ran
    assert [reply[0] for reply in alone] == [b"run", b"run"]

    claimed = [waiting_store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS).kind for run in runs]
    assert claimed == ["busy"] * len(runs)  # each claimed once
    assert waiting_store.replica_wait.short == 0


def test_calls_made_together_share_a_wait_and_each_gets_its_own_reply(
    waiting_store: RedisRunStore, primary: Server, new_chord: NewChord
) -> None:
    runs = [new_chord(1) for _ in range(16)]
    waiting_store.create_runs(runs)
    for run in runs:
        waiting_store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    before = primary.waits()
    outcomes: dict[str, str] = {}

    def complete(run: NewRun) -> None:
        frames = [Frame("p", "0.0", 0, 1), Frame("c", "0", 0, 2)]
        outcomes[run.run_id] = waiting_store.complete_step(run.run_id, "0.0.0", frames, '"v"').kind

    threads = [threading.Thread(target=complete, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert set(outcomes.values()) == {"start"}, outcomes  # each released its callback
    assert len(outcomes) == len(runs)
    assert 1 <= primary.waits() - before <= len(runs)


def test_a_replica_that_does_not_acknowledge_costs_the_wait_and_is_reported_not_failed(
    impatient_store: RedisRunStore,
    primary: Server,
    stopped_replica: Server,
    new_chord: NewChord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = new_chord(1)
    caplog.set_level(logging.WARNING, logger="pipelines.store")

    started = time.monotonic()
    assert impatient_store.create_run(run) == (run.run_id, True)
    waited_s = time.monotonic() - started

    assert waited_s >= WAIT_MS / 1000
    assert impatient_store.get_run(run.run_id) is not None  # it stands on the primary
    assert impatient_store.replica_wait is not None
    assert impatient_store.replica_wait.short == 1
    warning = [record.getMessage() for record in caplog.records if record.name == "pipelines.store"]
    assert len(warning) == 1
    assert f"127.0.0.1:{primary.port}" in warning[0]
    assert "acknowledged by 0 of the 1 replica(s)" in warning[0]
    assert "INFO replication" in warning[0]


def test_a_store_that_does_not_wait_sends_no_wait(primary: Server, new_chord: NewChord) -> None:
    store = make_store(StoreConfig(url=primary.url, retention_s=3600), namespace=fresh_namespace())
    assert isinstance(store, RedisRunStore)
    try:
        before = primary.waits()
        run = new_chord(1)
        store.create_run(run)
        store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
        store.complete_step(run.run_id, "0.0.0", [Frame("p", "0.0", 0, 1), Frame("c", "0", 0, 2)], "1")
        assert primary.waits() == before
        assert store.replica_wait is None
    finally:
        store.delete_namespace()
        store.close()


def test_warnings_of_short_waits_are_at_most_one_per_interval_and_count_them_all(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wait = ReplicaWait(replicas=2, timeout_ms=50, url="redis://user:secret@db:6379/0")
    caplog.set_level(logging.WARNING, logger="pipelines.store")

    wait.acknowledged(2, 5)
    wait.acknowledged(1, 3)
    wait.acknowledged(b"ERR", 1)  # not a count: none acknowledged

    assert wait.short == 4
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1
    assert "3 write(s)" in messages[0]
    assert "secret" not in messages[0]


def test_the_embedded_store_refuses_a_wait_for_replicas() -> None:
    with pytest.raises(ValueError, match="no replicas to wait for"):
        StoreConfig(url="memory://", wait_for_replicas=1)
