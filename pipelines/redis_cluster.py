"""Redis Cluster URLs for the run store: ``redis+cluster://[user:password@]host:port[,host:port...]``.

Why a scheme of its own: a cluster is several addresses, and its client (redis-py's ``RedisCluster``)
routes every command by key slot instead of talking to one server. The nodes named are only where the
client starts: it learns the rest of the cluster from them. A cluster has one database, 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
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
    """A client of the cluster the URL names (nothing connects until the first command)."""
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
