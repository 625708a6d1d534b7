"""One Redis connection per thread for the store's hot scripts (a step's claim and completion).

redis-py's connection pool takes a lock, checks the process id and the socket, and records pool
statistics on every command, to check a connection out and back in: on a worker that runs two
scripts a step, that is about as much CPU as the command itself. A thread that keeps its own
connection skips all of it. The connection is the thread's and the process's alone: a thread of a
forked child opens its own, and a thread's connection closes when the thread ends.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

import redis


class ThreadClients:
    """Each thread's single-connection client, made by ``make`` when the thread first asks."""

    def __init__(self, make: Callable[[], redis.Redis]) -> None:
        self._make = make
        self._local = threading.local()
        self._all: weakref.WeakSet[redis.Redis] = weakref.WeakSet()
        self._lock = threading.Lock()

    def get(self) -> redis.Redis:
        """This thread's client (a new one after a fork)."""
        local = self._local.__dict__
        client: redis.Redis | None = local.get("client")
        if client is None or local.get("pid") != os.getpid():
            client = self._make()
            local["client"], local["pid"] = client, os.getpid()
            with self._lock:
                self._all.add(client)
        return client

    def close(self) -> None:
        """Close every thread's connection (a thread that asks again gets a new one)."""
        with self._lock:
            clients = list(self._all)
            self._all.clear()
        for client in clients:
            client.close()
