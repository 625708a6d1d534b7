"""The PostgreSQL store's pool across a server restart (a cluster of the test's own): the restart closes every
pooled connection, and the first call that meets a lost one has the others replaced, so one call fails, not
one per connection."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from pipelines.errors import StoreUnavailable
from pipelines.store.postgres.connection import Connections
from tests.support.own_postgres import OwnPostgres

IDLE = 6


def call(connections: Connections) -> bool:
    """One call through the pool; whether it was answered."""
    try:
        with connections.connection() as conn:
            conn.execute("SELECT 1")
    except StoreUnavailable:
        return False
    return True


def test_after_a_restart_one_call_fails_and_the_pools_other_lost_connections_are_replaced(
    own_postgres: OwnPostgres,
) -> None:
    connections = Connections(url=own_postgres.url(), schema="restarted")
    try:
        with ExitStack() as held:  # so many at once that the pool keeps as many idle afterwards
            for _ in range(IDLE):
                held.enter_context(connections.connection())
        own_postgres.stop()
        own_postgres.start()

        answered = [call(connections) for _ in range(IDLE + 1)]
    finally:
        connections.close()

    assert answered == [False] + [True] * IDLE


def test_a_store_whose_server_is_down_says_so_and_answers_again_once_it_is_back(own_postgres: OwnPostgres) -> None:
    connections = Connections(url=own_postgres.url(), schema="restarted")
    try:
        assert call(connections)
        own_postgres.stop()
        with (
            pytest.raises(StoreUnavailable, match=r"does not answer .* Is it running\?") as down,
            connections.connection() as conn,
        ):
            conn.execute("SELECT 1")
        own_postgres.start()

        answered = [call(connections) for _ in range(3)]
    finally:
        connections.close()

    assert "\n" not in str(down.value)
    assert answered == [True] * 3
