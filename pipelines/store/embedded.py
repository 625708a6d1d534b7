"""The embedded mode's store: the Redis store's own scripts, run by an in-process Redis server.

fakeredis (with lupa's Lua 5.1, the version Redis embeds) answers every command and script in this
process: no service, no socket. Each store gets a server of its own, so two embedded apps never see
each other's runs. Its pub/sub wakes a waiter when a message arrives (fakeredis 2.39 and later), so
``wait_run`` blocks without polling here too.
"""

from __future__ import annotations

from pipelines.store.redis import RedisRunStore
from pipelines.store.step_history import STEP_LOG_BOUNDS

#: The URL that selects the embedded store (``store.url``).
EMBEDDED_URL = "memory://"


def embedded_store(*, namespace: str, retention_s: int, step_logs: tuple[int, int] = STEP_LOG_BOUNDS) -> RedisRunStore:
    """A run store on a Redis server of its own, in this process; a step keeps its newest ``step_logs``
    (records, bytes) log records."""
    # Imported here: a process on a real Redis never loads the in-process server or Lua.
    import fakeredis

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    return RedisRunStore(
        url=EMBEDDED_URL,
        namespace=namespace,
        retention_s=retention_s,
        client=client,
        step_log_records=step_logs[0],
        step_log_bytes=step_logs[1],
    )
