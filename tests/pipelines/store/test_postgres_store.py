"""What only the PostgreSQL store does: its tables made by numbered migrations at the first call (or by
``migrate``), namespaces that share a schema without seeing each other, and one clear line for each way
its URL, database, user or rights can be wrong. The role contract runs on it with the other stores."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from pydantic import ValidationError

from pipelines.config.sections import StoreConfig
from pipelines.errors import StoreUnavailable
from pipelines.store import NewRun
from pipelines.store.postgres import PostgresRunStore
from pipelines.store.postgres.schema import LATEST, MIGRATIONS
from pipelines.store.step_history import AttemptLog, LogRecord
from pipelines.wire.steps import Frame
from tests.support.backends import POSTGRES_URL, schema_of
from tests.support.housekeeping import fresh_namespace
from tests.support.ports import free_port

PASSWORD = "s3cret"


def with_user(url: str, user: str, password: str | None = None, port: int | None = None) -> str:
    parts = urlsplit(url)
    login = f"{user}:{password}" if password else user
    return urlunsplit(parts._replace(netloc=f"{login}@{parts.hostname}:{port or parts.port or 5432}"))


def a_run() -> NewRun:
    return NewRun(run_id=uuid.uuid4().hex, pipeline="p", steps=[("0", "a")], starts={}, entries={})


@pytest.fixture
def schema(services: None) -> Iterator[str]:
    """A schema of the test's own, dropped afterwards."""
    name = schema_of(fresh_namespace())
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def exists(schema: str) -> bool:
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute("SELECT to_regnamespace(%s)", [f'"{schema}"']).fetchone()
    return row is not None and row[0] is not None


def test_the_first_call_makes_the_tables_at_the_latest_version_and_migrate_then_has_nothing_to_do(schema: str) -> None:
    store = PostgresRunStore(url=POSTGRES_URL, namespace="n", retention_s=60, schema=schema)
    try:
        made_before_any_call = exists(schema)
        store.ping()

        assert (made_before_any_call, exists(schema)) == (False, True)
        assert store.migrate() == []
        with psycopg.connect(POSTGRES_URL) as conn:
            versions = conn.execute(f'SELECT version FROM "{schema}".migrations ORDER BY version').fetchall()
        assert versions == [(version,) for version in range(1, LATEST + 1)]
    finally:
        store.close()


def test_tables_of_an_earlier_release_are_upgraded_at_the_first_call_with_their_runs_kept(schema: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        first = MIGRATIONS[0]
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".migrations (version integer PRIMARY KEY, applied_at timestamptz)')
        conn.execute(first[1].format(s=f'"{schema}"').encode())
        conn.execute(f'INSERT INTO "{schema}".migrations (version) VALUES (%s)', [first[0]])
    old = PostgresRunStore(url=POSTGRES_URL, namespace="n", retention_s=60, schema=schema)
    run = a_run()
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:  # a run as the earlier release stored it
        conn.execute(
            f'INSERT INTO "{schema}".runs (ns, run_id, pipeline, status, created_at, touched, expires_at) VALUES '
            "('n', %s, 'p', 'pending', 1, 1, 9e15)",
            [run.run_id],
        )
        conn.execute(
            f'INSERT INTO "{schema}".steps (ns, run_id, node, actor) VALUES (%s, %s, %s, %s)',
            ["n", run.run_id, "0", "a"],
        )
    try:
        claimed = old.claim_step(run.run_id, "0", attempt=1, lease_ms=60_000, worker="host:1/2")
        status = old.get_run(run.run_id)

        assert claimed.kind == "run"
        assert status is not None
        assert [(entry.attempt, entry.worker) for entry in status.steps[0].history] == [(1, "host:1/2")]
        assert old.migrate() == []
    finally:
        old.close()


def test_tables_a_later_release_migrated_are_refused_with_the_versions(schema: str) -> None:
    PostgresRunStore(url=POSTGRES_URL, namespace="n", retention_s=60, schema=schema).migrate()
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{schema}".migrations (version) VALUES (%s)', [LATEST + 1])
    store = PostgresRunStore(url=POSTGRES_URL, namespace="n", retention_s=60, schema=schema)
    try:
        with pytest.raises(StoreUnavailable, match=f"at version {LATEST + 1}, newer than this release's {LATEST}"):
            store.ping()
    finally:
        store.close()


def test_a_run_past_its_retention_goes_with_every_row_of_it_at_a_later_start(schema: str) -> None:
    store = PostgresRunStore(url=POSTGRES_URL, namespace="n", retention_s=1, schema=schema)
    old = NewRun(
        run_id=uuid.uuid4().hex,
        pipeline="p",
        steps=[("0.0", "a"), ("0.1", "b")],
        starts={"0": "[]", "0.1": "[]"},
        entries={"0": ["0.0"], "0.1": ["0.1"]},
        first_input="[[],{}]",
    )
    try:
        store.create_run(old)
        store.claim_step(old.run_id, "0.0", attempt=1, lease_ms=60_000)
        logs = AttemptLog(1, (LogRecord(1, "INFO", "shop", "charged"),))
        store.complete_step(old.run_id, "0.0", [Frame("c", "0", 0, 2)], "1", logs=logs)
        assert store.step_logs(old.run_id, ["0.0"]) == {"0.0": (logs,)}
        deadline = time.monotonic() + 30
        while store.run_state(old.run_id) is not None:
            assert time.monotonic() < deadline, "the run outlived its retention"
            time.sleep(0.05)
        store.create_run(a_run())

        with psycopg.connect(POSTGRES_URL) as conn:
            left = {
                table: conn.execute(
                    f'SELECT count(*) FROM "{schema}".{table} WHERE run_id = %s', [old.run_id]
                ).fetchone()
                for table in ("runs", "steps", "starts", "results", "step_logs")
            }
        assert left == dict.fromkeys(left, (0,))
    finally:
        store.close()


def test_namespaces_that_share_a_schema_never_see_each_others_runs(schema: str) -> None:
    shop = PostgresRunStore(url=POSTGRES_URL, namespace="shop", retention_s=60, schema=schema)
    billing = PostgresRunStore(url=POSTGRES_URL, namespace="billing", retention_s=60, schema=schema)
    try:
        run = a_run()
        shop.create_run(run)

        assert shop.run_state(run.run_id) == "pending"
        assert billing.run_state(run.run_id) is None
        assert billing.recent_runs(10) == []
        assert billing.create_run(run) == (run.run_id, True)  # its own run of that id
    finally:
        shop.close()
        billing.close()


@pytest.fixture
def user(services: None) -> Iterator[str]:
    """A login role of the test's own, with no rights beyond connecting; dropped afterwards."""
    name = schema_of(fresh_namespace())
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN')
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{name}"')
        conn.execute(f'DROP ROLE "{name}"')


def test_a_user_without_rights_is_told_to_migrate_as_one_who_may_and_to_grant_it_the_tables(
    schema: str, user: str
) -> None:
    store = PostgresRunStore(url=with_user(POSTGRES_URL, user), namespace="n", retention_s=60, schema=schema)
    owner = PostgresRunStore(url=POSTGRES_URL, namespace="n", retention_s=60, schema=schema)
    try:
        with pytest.raises(StoreUnavailable) as refused:
            store.create_run(a_run())
        owner.migrate()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{user}"')
            conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{user}"')
        run = a_run()

        assert "\n" not in str(refused.value)
        assert "pipelines store migrate" in str(refused.value)
        assert store.create_run(run) == (run.run_id, True)  # granted: the tables are there, it may use them
    finally:
        store.close()
        owner.close()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (with_user(POSTGRES_URL, "postgres", PASSWORD, port=free_port()), "does not answer"),
        (with_user(POSTGRES_URL, "no_such_user", PASSWORD), "refused the login"),
        (POSTGRES_URL.rsplit("/", 1)[0] + "/no_such_database", "has no such database"),
    ],
    ids=["no-server", "unknown-user", "missing-database"],
)
def test_a_wrong_url_says_what_is_wrong_in_one_line_without_the_password(services: None, url: str, said: str) -> None:
    store = PostgresRunStore(url=url, namespace="n", retention_s=60)  # made: nothing connects yet
    try:
        with pytest.raises(StoreUnavailable) as raised:
            store.run_state("r")
    finally:
        store.close()

    assert said in str(raised.value)
    assert "\n" not in str(raised.value)
    assert PASSWORD not in str(raised.value)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"url": POSTGRES_URL, "postgres_schema": "1st"}, "expected a schema name"),
        ({"url": POSTGRES_URL, "postgres_schema": 'a"; DROP TABLE x; --'}, "expected a schema name"),
        ({"url": "postgresql://postgres@127.0.0.1:5432"}, "expected the database after the host"),
        ({"url": "postgresql://postgres@127.0.0.1:port/test"}, "port is a number"),
    ],
)
def test_a_schema_or_url_that_cannot_work_is_a_configuration_error(settings: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        StoreConfig(**settings)


def test_a_store_url_naming_postgresql_without_psycopg_says_which_extra_to_install() -> None:
    script = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from pipelines.config.sections import StoreConfig\n"
        "from pipelines.errors import ConfigError\n"
        "from pipelines.store import make_store\n"
        "try:\n"
        f"    make_store(StoreConfig(url={POSTGRES_URL!r}), namespace='n')\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
    )
    said = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)

    assert "pip install 'rabbit-pipelines[postgres]'" in said.stdout
