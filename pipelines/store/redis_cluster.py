"""The run store's client of a Redis Cluster (``redis+cluster://``, see ``pipelines.config.redis_urls``).

Why a client of its own: redis-py's ``RedisCluster`` routes every command by key slot instead of
talking to one server, and asks the cluster for its slots when it is made.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, cast

from pipelines.config.redis_urls import parse_cluster_url

if TYPE_CHECKING:
    from redis.cluster import RedisCluster


def cluster_client(url: str, *, timeout_s: float) -> RedisCluster:
    """A client of the cluster the URL names; nothing connects until the first command (see
    :class:`_ClusterOnFirstUse`)."""
    return cast("RedisCluster", _ClusterOnFirstUse(url, timeout_s))


class _ClusterOnFirstUse:
    """A ``RedisCluster`` made when it is first used.

    redis-py's asks the cluster for its slots when it is made, and raises when no node answers: a store
    (a worker's, at boot) would then fail to be made at all while the cluster is down, where a store on
    one Redis is made and reports the outage on each call (``StoreUnavailable``), so that messages are
    put off and tried again. Made here on first use, a failed attempt raises from that call, and the
    next call tries again.
    """

    def __init__(self, url: str, timeout_s: float) -> None:
        self._url = url
        self._timeout_s = timeout_s
        self._client: RedisCluster | None = None
        self._lock = threading.Lock()

    def _made(self) -> RedisCluster:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = _make_cluster_client(self._url, self._timeout_s)
                client = self._client
        return client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    def close(self) -> None:
        """Close the client; the next call makes a new one, as a client of one Redis connects again."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def _make_cluster_client(url: str, timeout_s: float) -> RedisCluster:
    from redis.cluster import ClusterNode, RedisCluster  # redis-py costs memory: only where a store is used

    address = parse_cluster_url(url)
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in address.nodes],  # type: ignore[no-untyped-call]
        username=address.username,
        password=address.password,
        ssl=address.tls,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
