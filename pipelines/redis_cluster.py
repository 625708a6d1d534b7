"""Redis Cluster URLs for the run store: ``redis+cluster://[user:password@]host:port[,host:port...]``.

Why a scheme of its own: a cluster is several addresses, and its client (redis-py's ``RedisCluster``)
routes every command by key slot instead of talking to one server. The nodes named are only where the
client starts: it learns the rest of the cluster from them. A cluster has one database, 0.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from redis.cluster import RedisCluster

#: URL schemes of a Redis Cluster (``rediss+cluster`` for TLS).
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


@dataclass(frozen=True)
class ClusterAddress:
    """What a cluster URL says: where to start, who to be, whether to use TLS."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def parse_cluster_url(url: str) -> ClusterAddress:
    """The URL's parts.

    Raises:
        ValueError: Not a cluster URL, a node without a numeric port, or a database other than 0.
    """
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        raise ValueError(f"expected a URL starting with {' or '.join(s + '://' for s in CLUSTER_SCHEMES)}")
    nodes, username, password = nodes_and_credentials(parts.netloc, "redis+cluster://host:7000,host:7001")
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError("a Redis Cluster has one database, 0: leave the database out of the URL")
    return ClusterAddress(nodes=nodes, username=username, password=password, tls=parts.scheme == "rediss+cluster")


def nodes_and_credentials(netloc: str, example: str) -> tuple[tuple[tuple[str, int], ...], str | None, str | None]:
    """The ``host:port`` addresses of a URL's comma-separated network location, and its user and password.

    Raises:
        ValueError: An address without a numeric port, or none (``example`` shows one).
    """
    credentials, _, hosts = netloc.rpartition("@")
    username, _, password = credentials.partition(":") if credentials else ("", "", "")
    nodes: list[tuple[str, int]] = []
    for address in filter(None, hosts.split(",")):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"expected host:port for every node, not {address!r}")
        nodes.append((host, int(port)))
    if not nodes:
        raise ValueError(f"expected at least one node, like {example}")
    return tuple(nodes), unquote(username) or None, unquote(password) or None


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
        if self._client is not None:
            self._client.close()


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
