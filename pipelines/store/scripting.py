"""How the run store sends its Lua scripts to Redis: each thread's own connection for single calls,
pipelines that go by SHA, and the script's text where a shard may not have it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any, cast

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from pipelines.store.thread_clients import ThreadClients


class Scripts:
    """The store's scripts on ``client``; ``thread_clients``, when given, carry the single calls."""

    def __init__(self, client: redis.Redis | RedisCluster, *, thread_clients: ThreadClients | None) -> None:
        self._client = client
        self._cluster = isinstance(client, RedisCluster)
        self._thread_clients = thread_clients
        self._registered: list[Script] = []

    def register(self, name: str) -> Script:
        """The script ``lua/<name>.lua`` of this package."""
        text = resources.files("pipelines.store").joinpath("lua", f"{name}.lua").read_text()
        script = self._client.register_script(text)
        self._registered.append(script)
        return script

    def run(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """``script``'s raw reply, on this thread's connection (redis-py's pool takes a lock, checks the
        socket and records statistics to lend a connection: as much CPU as a step's script itself)."""
        client = self._thread_clients.get() if self._thread_clients is not None else None
        return script(keys=keys, args=args, client=client)

    def queue(self, pipe: Any, script: Script, keys: list[str], args: list[Any]) -> None:
        """Queue ``script`` in ``pipe``. A cluster pipeline sends the script's text: each shard may not
        have it cached (a replica promoted after a failover starts with none), and it cannot load it.
        Otherwise the script goes by its SHA (see :meth:`execute`)."""
        if self._cluster:
            pipe.execute_command("EVAL", script.script, len(keys), *keys, *args)
        else:
            pipe.evalsha(script.sha, len(keys), *keys, *args)

    def execute(self, fill: Callable[[Any], None]) -> list[Any]:
        """Fill a new pipeline (no transaction) and send it in one round trip.

        redis-py's own script pipelines ask Redis whether their scripts are cached before every send (a
        round trip more each time); here scripts go by SHA and, only when Redis has lost them (it
        restarted), are loaded and the pipeline sent again. NOSCRIPT fails every script call of the
        pipeline, so no script ran twice; what else it holds must write idempotently (index entries, TTLs).
        """
        for attempt in (1, 2):
            pipe = self._client.pipeline(transaction=False)
            fill(pipe)
            try:
                return cast(list[Any], pipe.execute())
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                for script in self._registered:
                    self._client.script_load(script.script)
        raise AssertionError("unreachable")
