"""The run store's URLs for a Redis Cluster and for a primary found through Redis Sentinel.

``redis+cluster://[user:password@]host:port[,host:port...]``: a cluster is several addresses, and its
client routes every command by key slot instead of talking to one server. The nodes named are only where
the client starts: it learns the rest of the cluster from them. A cluster has one database, 0.

``redis+sentinel://[user:password@]host:26379[,host:26380...]/<primary name>[/<db>]``: the store's
address is not a server but a name the sentinels resolve to whichever server is the primary now. The
user and password are the primary's; the sentinels are asked without them.

Parsed here, where the configuration checks them; the clients are made in ``pipelines.store``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

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


#: URL schemes of a primary found through Sentinel (``rediss+sentinel`` for TLS to the primary).
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
_EXAMPLE = "redis+sentinel://host:26379,host:26380/mymaster/0"


@dataclass(frozen=True)
class SentinelAddress:
    """What a Sentinel URL says: whom to ask, for which primary, which database, who to be, TLS or not."""

    sentinels: tuple[tuple[str, int], ...]
    primary: str
    database: int
    username: str | None
    password: str | None
    tls: bool


def is_sentinel_url(url: str) -> bool:
    return urlsplit(url).scheme in SENTINEL_SCHEMES


def parse_sentinel_url(url: str) -> SentinelAddress:
    """The URL's parts.

    Raises:
        ValueError: Not a Sentinel URL, a sentinel without a numeric port, no primary name, or a
            database that is not a number.
    """
    parts = urlsplit(url)
    if parts.scheme not in SENTINEL_SCHEMES:
        raise ValueError(f"expected a URL starting with {' or '.join(s + '://' for s in SENTINEL_SCHEMES)}")
    sentinels, username, password = nodes_and_credentials(parts.netloc, _EXAMPLE)
    primary, _, database = parts.path.strip("/").partition("/")
    if not primary:
        raise ValueError(f"expected the primary's name as the sentinels know it after the hosts, like {_EXAMPLE}")
    if database and not database.isdigit():
        raise ValueError(f"expected the database as a number after the primary's name, like {_EXAMPLE}")
    return SentinelAddress(
        sentinels=sentinels,
        primary=primary,
        database=int(database or 0),
        username=username,
        password=password,
        tls=parts.scheme == "rediss+sentinel",
    )
