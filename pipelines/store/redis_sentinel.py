"""The run store's client of a primary found through Redis Sentinel (``redis+sentinel://``, see
``pipelines.config.redis_urls``).

The client (redis-py's ``SentinelConnectionPool``) asks the sentinels named, connects to that primary,
and asks again when its connection is lost or the server it reaches has become a replica: a failover
costs the store the time the sentinels take to agree and promote, during which its calls fail as
unavailable and are tried again.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from pipelines.config.redis_urls import parse_sentinel_url

if TYPE_CHECKING:
    import redis


def sentinel_primary(url: str, *, timeout_s: float, single_connection: bool = False) -> redis.Redis:
    """A client of the primary the URL names, found through its sentinels when it connects (nothing
    connects here unless ``single_connection``: a client of one connection, kept, as a thread's own)."""
    import redis
    from redis.sentinel import Sentinel, SentinelConnectionPool  # redis-py costs memory: only where used

    address = parse_sentinel_url(url)
    connection_class = _connection_classes()[address.tls]
    sentinels = Sentinel(list(address.sentinels), socket_timeout=timeout_s, socket_connect_timeout=timeout_s)  # type: ignore[no-untyped-call, unused-ignore]
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
