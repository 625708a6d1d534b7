"""The `pipelines` command on a PostgreSQL store (a cluster of the module's own): each way its URL, database,
user or rights can be wrong is one line that says what to do, never a traceback, from the command that
migrates the store and from one that loads the app and reads a run alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pipelines.store.postgres import PostgresRunStore
from tests.support.own_postgres import OwnPostgres
from tests.support.ports import free_port
from tests.test_cli import environment, pipelines

SCHEMA = "cli_store"
PASSWORD = "s3cret"
COMMANDS = {"migrate": ("store", "migrate"), "status": ("status", "0123456789abcdef")}
#: Each wrong ``store.url`` (made on the module's cluster) and what the line says of it.
WRONG_URLS: dict[str, tuple[Callable[[OwnPostgres], str], tuple[str, ...]]] = {
    "no-server": (
        lambda _: f"postgresql://postgres:{PASSWORD}@127.0.0.1:{free_port()}/postgres",
        ("postgresql://postgres:***@127.0.0.1:", "does not answer", "Is it running?"),
    ),
    "missing-database": (
        lambda cluster: cluster.url(database="no_such_database"),
        ("has no such database", 'database "no_such_database" does not exist', "Create it (`createdb`)"),
    ),
    "unknown-user": (
        lambda cluster: cluster.url(user="no_such_user"),
        ("refused the login", 'role "no_such_user" does not exist', "Check the user name and password in store.url"),
    ),
}


@pytest.fixture
def shared_postgres(module_postgres: OwnPostgres) -> Iterator[OwnPostgres]:
    """The module's one cluster (one ``initdb`` for all its tests), left as each test found it: the role and
    schema a test made are dropped after it."""
    yield module_postgres
    module_postgres.sql(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    module_postgres.sql("DROP ROLE IF EXISTS weak")


def one_line_of(cluster: OwnPostgres, namespaces: Callable[[], str], url: str, command: str) -> str:
    """What ``command`` says on stderr with ``store.url`` set to ``url``; asserts it fails in one line."""
    env = environment(namespaces(), PIPELINES_STORE__URL=url, PIPELINES_STORE__POSTGRES_SCHEMA=SCHEMA)
    result = pipelines(env, *COMMANDS[command])

    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("pipelines: PostgreSQL at postgresql://"), line
    assert PASSWORD not in line
    return line


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", WRONG_URLS)
def test_a_wrong_url_says_what_is_wrong_and_what_to_do(
    services: None, shared_postgres: OwnPostgres, namespaces: Callable[[], str], case: str, command: str
) -> None:
    url_of, said = WRONG_URLS[case]

    line = one_line_of(shared_postgres, namespaces, url_of(shared_postgres), command)

    assert all(part in line for part in said), line


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("schema_made", [False, True], ids=["schema-it-cannot-create", "tables-it-may-not-use"])
def test_a_user_without_rights_is_told_who_migrates_and_what_to_grant(
    services: None, shared_postgres: OwnPostgres, namespaces: Callable[[], str], command: str, schema_made: bool
) -> None:
    shared_postgres.sql("CREATE ROLE weak LOGIN")
    if schema_made:  # its tables made by their owner: only the rights on them are missing
        owner = PostgresRunStore(url=shared_postgres.url(), namespace="n", retention_s=60, schema=SCHEMA)
        try:
            owner.migrate()
        finally:
            owner.close()

    line = one_line_of(shared_postgres, namespaces, shared_postgres.url(user="weak"), command)

    assert f"refused the store's user on schema {SCHEMA}" in line
    assert "Run `pipelines store migrate` as a user who may create it" in line
    assert "grant this one USAGE on the schema" in line
