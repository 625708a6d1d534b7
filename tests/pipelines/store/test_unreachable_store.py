"""A store whose Redis does not answer is made all the same (a worker boots), and each call then says
so as ``StoreUnavailable``, naming the URL without its password, with what to try for the kind of Redis
the URL names: one Redis, a Redis Cluster (whose client redis-py would otherwise connect, and fail, when
it is made) and a primary behind Sentinel. A Redis that answers but refuses the login says so instead.
The servers that answer are started here, on ports of their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.errors import StoreUnavailable
from pipelines.store import RedisRunStore
from tests.support.ports import free_port
from tests.support.redis_servers import Sentinel, Server

PASSWORD = "s3cret"
#: The hint for one server, which is no help for a cluster or a sentinel's primary.
COMPOSE_HINT = "docker compose up -d redis"


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """The servers a test starts, stopped afterwards."""
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def unavailable(url: str) -> str:
    """What a call on a store at ``url`` says (a StoreUnavailable is required)."""
    store = RedisRunStore(url=url, namespace="t-down", retention_s=60)  # made: nothing connects yet
    try:
        with pytest.raises(StoreUnavailable) as raised:
            store.claim_step("r", "0", attempt=1, lease_ms=1)
    finally:
        store.close()
    return str(raised.value)


@pytest.mark.parametrize(
    ("url", "reported"),
    [
        (
            "redis://:s3cret@127.0.0.1:1/0",
            r"Redis at redis://:\*\*\*@127.0.0.1:1/0 does not answer .* Is it running\? Try `docker compose up",
        ),
        (
            "redis+cluster://:s3cret@127.0.0.1:1",
            r"Redis Cluster at redis\+cluster://:\*\*\*@127.0.0.1:1 does not answer .* Are its nodes running\?",
        ),
        (
            "redis+sentinel://:s3cret@127.0.0.1:1/main/0",
            r"Redis at redis\+sentinel://:\*\*\*@127.0.0.1:1/main/0: no sentinel named there answered",
        ),
    ],
)
def test_a_redis_that_does_not_answer_is_reported_without_the_password(url: str, reported: str) -> None:
    said = unavailable(url)

    assert re.search(reported, said), said
    assert PASSWORD not in said
    if not url.startswith("redis://"):
        assert COMPOSE_HINT not in said


def test_a_primary_the_sentinels_name_that_does_not_answer_is_reported_with_a_hint_for_sentinel(
    tmp_path: Path, servers: list[Server]
) -> None:
    sentinel = Sentinel(tmp_path / "sentinel", name="main", primary_port=free_port())  # no server there
    servers.append(sentinel)

    said = unavailable(sentinel.url_of("main"))

    assert f"Redis at {sentinel.url_of('main')} does not answer" in said
    assert "Is the primary the sentinels name running" in said
    assert COMPOSE_HINT not in said


@pytest.mark.parametrize("kind", ["server", "cluster"])
def test_a_redis_that_refuses_the_login_says_so_and_the_right_password_is_let_in(
    tmp_path: Path, servers: list[Server], kind: str
) -> None:
    # A cluster node's bus on a free port too (its default, the port + 10000, may be taken).
    node = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", str(free_port()))
    server = Server(tmp_path / kind, *(node if kind == "cluster" else ()), password=PASSWORD)
    servers.append(server)
    if kind == "cluster":
        server.client.cluster("ADDSLOTSRANGE", 0, 16383)
        server.await_condition(lambda: server.client.cluster("INFO")["cluster_state"] == "ok", "to serve every slot")
    scheme, path, name = ("redis+cluster", "", "Redis Cluster") if kind == "cluster" else ("redis", "/0", "Redis")

    said = unavailable(f"{scheme}://:wrong@127.0.0.1:{server.port}{path}")

    assert f"{name} at {scheme}://:***@127.0.0.1:{server.port}{path} refused the login" in said
    assert "Check the user name and password in store.url" in said
    assert "does not answer" not in said
    let_in = RedisRunStore(
        url=f"{scheme}://:{PASSWORD}@127.0.0.1:{server.port}{path}", namespace="t-in", retention_s=60
    )
    assert let_in.claim_step("r", "0", attempt=1, lease_ms=1).kind == "missing"  # no such run: an answer
    let_in.close()
