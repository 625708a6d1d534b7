"""The suite leaves nothing behind: stale test namespaces go, other namespaces stay, leftover processes stop."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pika
import psycopg
import pytest
import redis

from tests.support.backends import AMQP_URL, POSTGRES_URL, REDIS_URL, schema_of
from tests.support.housekeeping import (
    REGISTRY,
    RUN_STARTED_S,
    ListingUnavailable,
    delete_stale_namespaces,
    delete_stale_schemas,
    delete_test_namespace,
    fresh_namespace,
    is_stale,
    listed,
    rabbitmqctl,
    start_process,
    stop_leftover_processes,
    stop_process,
)
from tests.support.ports import free_port


def _gone_pid() -> int:
    """The pid of a process that has ended (a run that was interrupted)."""
    return int(subprocess.run(["sh", "-c", "echo $$"], capture_output=True, check=True).stdout)


def _declare(namespace: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
        connection.channel().queue_declare(f"{namespace}.default.resize", durable=True)
    redis.Redis.from_url(REDIS_URL).set(f"{namespace}:run:1", "x")


def _delete(namespace: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
        connection.channel().queue_delete(f"{namespace}.default.resize")
    redis.Redis.from_url(REDIS_URL).delete(f"{namespace}:run:1")


def _left(namespaces: list[str]) -> list[str]:
    """The namespaces that still have a queue or a Redis key."""
    queues = listed("list_queues", amqp_url=AMQP_URL)
    client = redis.Redis.from_url(REDIS_URL)
    return [
        namespace
        for namespace in namespaces
        if any(q.startswith(f"{namespace}.") for q in queues) or client.exists(f"{namespace}:run:1")
    ]


def test_only_the_namespaces_of_earlier_runs_that_ended_are_deleted(services: None) -> None:
    earlier = f"t-{RUN_STARTED_S - 600:08x}-{_gone_pid():x}-{uuid.uuid4().hex[:6]}"
    current = fresh_namespace()
    other = f"shop-{uuid.uuid4().hex[:6]}"  # not a test namespace: never touched
    unstamped = f"t-{uuid.uuid4().hex[:10]}"  # no run stamp: its age cannot be told, so it stays
    namespaces = [earlier, current, other, unstamped]
    try:
        for namespace in namespaces:
            _declare(namespace)

        for namespace in (earlier, current):  # a virtual host a run traced publishes in
            subprocess.run([*rabbitmqctl(), "-q", "add_vhost", namespace], check=True, capture_output=True)

        deleted = delete_stale_namespaces(AMQP_URL, REDIS_URL)

        assert earlier in deleted
        assert _left(namespaces) == [current, other, unstamped]
        assert [v for v in (earlier, current) if v in listed("list_vhosts", amqp_url=AMQP_URL)] == [current]
    finally:
        for namespace in namespaces:
            _delete(namespace)
        # The earlier run's, if it is left, goes with the next run's stale namespaces.
        subprocess.run([*rabbitmqctl(), "-q", "delete_vhost", current], check=False, capture_output=True)


def test_only_the_store_schemas_of_earlier_runs_that_ended_are_dropped(services: None) -> None:
    earlier = schema_of(f"t-{RUN_STARTED_S - 600:08x}-{_gone_pid():x}-{uuid.uuid4().hex[:6]}")
    current = schema_of(fresh_namespace())
    other = f"shop_{uuid.uuid4().hex[:6]}"  # not a test namespace's: never touched
    schemas = [earlier, current, other]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        try:
            for schema in schemas:
                conn.execute(f'CREATE SCHEMA "{schema}"')

            dropped = delete_stale_schemas(POSTGRES_URL)
            left = [
                row[0] for row in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", [schemas])
            ]

            assert earlier in dropped
            assert sorted(left) == sorted([current, other])
        finally:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}"')


def test_a_namespace_of_this_run_or_of_a_run_still_going_is_not_stale() -> None:
    assert not is_stale(fresh_namespace())
    assert not is_stale(f"t-{RUN_STARTED_S + 5:08x}-{_gone_pid():x}-abcdef")  # a later run's
    assert is_stale(f"t-{RUN_STARTED_S - 5:08x}-{_gone_pid():x}-abcdef")
    assert not is_stale("production")


def test_a_process_an_interrupted_run_left_behind_is_stopped_with_its_group() -> None:
    leftover = start_process(["sh", "-c", "sleep 300 & wait"])
    record = REGISTRY / str(leftover.pid)
    record.write_text(json.dumps({"suite": _gone_pid(), "command": "sh"}))  # as if its run was killed
    try:
        stopped = stop_leftover_processes()

        assert leftover.pid in stopped
        assert leftover.wait(timeout=30) != 0
        assert not record.exists()
    finally:
        stop_process(leftover)


def test_a_process_that_ignores_sigterm_is_killed_with_its_group_when_the_test_ends() -> None:
    stubborn = start_process(["sh", "-c", "trap '' TERM; sleep 300 & wait"])

    status = stop_process(stubborn, timeout_s=0.5)

    assert status != 0
    assert not (REGISTRY / str(stubborn.pid)).exists()


def test_without_rabbitmqctl_or_management_api_teardown_says_so_and_still_deletes_the_redis_keys(
    no_rabbitmqctl: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIPELINES_TEST_RABBITMQ_API", f"http://127.0.0.1:{free_port()}")  # nothing listens
    namespace = fresh_namespace()
    client = redis.Redis.from_url(REDIS_URL)
    client.set(f"{namespace}:run:1", "x")

    with pytest.raises(ListingUnavailable) as unavailable:
        delete_test_namespace(AMQP_URL, REDIS_URL, namespace)

    assert "PIPELINES_TEST_RABBITMQCTL" in str(unavailable.value)
    assert "PIPELINES_TEST_RABBITMQ_API" in str(unavailable.value)
    assert "guest" not in str(unavailable.value)  # no credentials in what is printed
    assert not client.exists(f"{namespace}:run:1")


TESTS = Path(__file__).resolve().parent
#: Where a process may be started otherwise, and why the helper does not fit there.
STARTED_OTHERWISE = {
    "support/housekeeping.py": "the helper itself",
    "test_housekeeping.py": "this check, whose pattern names what it looks for",
    "support/fresh_imports.py": "it forks a child per module to import and waits for every one before it returns",
    "support/cluster/local_slot.py": "its guardian must outlive the session: it sweeps the slot when the session dies",
    "support/cluster/local_rabbit.py": "cluster nodes in network namespaces, which the slot's sweep kills by namespace",
    "support/cluster/local_redis.py": "cluster servers, which the slot's sweep kills by working directory",
    "support/cluster/local_sentinel.py": "a primary, its replica and sentinels, which the slot's sweep kills by "
    "working directory",
}
STARTS = re.compile(r"\bPopen\(|\bos\.(fork|spawn\w*|exec\w*)\(|multiprocessing|create_subprocess_exec")


def test_every_process_a_test_starts_goes_through_the_process_helper() -> None:
    """So each is in a group of its own, dies with the suite, is recorded until it is stopped and is
    stopped with its group however the test ends (``subprocess.run`` waits for its process: allowed)."""
    found = [
        f"{path.relative_to(TESTS)}:{number}: {line.strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        if str(path.relative_to(TESTS)) not in STARTED_OTHERWISE
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if STARTS.search(line) and not line.lstrip().startswith("#")
    ]

    assert found == [], (
        "start these with tests.support.housekeeping.start_process (stop with stop_process):\n" + "\n".join(found)
    )
