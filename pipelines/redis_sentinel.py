"""Redis Sentinel URLs for the run store:
``redis+sentinel://[user:password@]host:26379[,host:26380...]/<primary name>[/<db>]``.

Why a scheme of its own: with Sentinel the store's address is not a server but a name the sentinels
resolve to whichever server is the primary now. The client (redis-py's ``SentinelConnectionPool``)
asks the sentinels named, connects to that primary, and asks again when its connection is lost or the
server it reaches has become a replica: a failover costs the store the time the sentinels take to agree
and promote, during which its calls fail as unavailable and are tried again. The user and password are
the primary's; the sentinels are asked without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pipelines.redis_cluster import nodes_and_credentials

if TYPE_CHECKING:
    import redis

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


def sentinel_primary(url: str, *, timeout_s: float, single_connection: bool = False) -> redis.Redis:
    """A client of the primary the URL names, found through its sentinels when it connects (nothing
    connects here unless ``single_connection``: a client of one connection, kept, as a thread's own)."""
    import redis
    from redis.sentinel import Sentinel, SentinelConnectionPool  # redis-py costs memory: only where used

    address = parse_sentinel_url(url)
    connection_class = _connection_classes()[address.tls]
    sentinels = Sentinel(list(address.sentinels), socket_timeout=timeout_s, socket_connect_timeout=timeout_s)  # type: ignore[no-untyped-call]
    pool = SentinelConnectionPool(  # type: ignore[no-untyped-call]
        address.primary,
        sentinels,
        db=address.database,
        username=address.username,
        password=address.password,
        connection_class=connection_class,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=30,
    )
    return redis.Redis(connection_pool=pool, single_connection_client=single_connection)


@cache
def _connection_classes() -> dict[bool, type]:
    """The connection classes (plain, TLS) that find the primary again on every reconnection.

    redis-py's ``SentinelManagedConnection`` asks the sentinels in ``connect()``, but a connection that
    was lost reconnects when it next sends (``send_packed_command``) through the base class, to the
    address it had: after a failover, the old primary's, for ever. Reconnecting through ``connect()``
    first makes it ask again.
    """
    from redis.connection import SSLConnection
    from redis.sentinel import SentinelManagedConnection

    class RediscoveringConnection(SentinelManagedConnection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            if not self._sock:
                self.connect()  # type: ignore[no-untyped-call]
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    class RediscoveringTLSConnection(RediscoveringConnection, SSLConnection):
        pass

    return {False: RediscoveringConnection, True: RediscoveringTLSConnection}
