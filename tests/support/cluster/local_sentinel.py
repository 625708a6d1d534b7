"""A Redis primary with one replica, watched by three Redis Sentinels, on the slot's loopback ports.

The primary and its replica are the slot's Redis ports 6 and 7 (the Redis Cluster has 0 to 5), the
sentinels ``Slot.sentinel_port(0..2)``. Every process runs in the foreground as a child of the test
session, in a directory of its own under the slot's Redis directory (which is how a sweep finds it
again), with nothing persisted but the sentinels' own configuration, which they rewrite as they learn
the topology. The sentinels agree on a failover with a quorum of 2 and declare a primary down after
1 s without an answer (the default is 30 s), so a primary's loss is repaired within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import redis

from tests.support.cluster.local_slot import Slot, wait_for

#: The name the sentinels know the primary by (the ``/<name>`` of a ``redis+sentinel://`` URL).
PRIMARY_NAME = "pipelines"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 10_000
START_TIMEOUT_S = 30.0
#: Longest a promotion may take (down-after, the sentinels' vote, a loaded machine).
FAILOVER_TIMEOUT_S = 45.0


class SentinelSetupError(RuntimeError):
    """A server exited while starting, or the setup never became whole."""


@dataclass
class Process:
    port: int
    dir: Path
    sentinel: bool = False
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)


class LocalSentinel:
    """Starts the primary, its replica and three sentinels; kills and restarts servers; removes it all."""

    def __init__(self, slot: Slot) -> None:
        self.slot = slot
        home = slot.redis_dir / "sentinel"
        self.servers = [Process(port=slot.redis_port(k), dir=home / str(slot.redis_port(k))) for k in (6, 7)]
        self.sentinels = [
            Process(port=slot.sentinel_port(k), dir=home / str(slot.sentinel_port(k)), sentinel=True) for k in range(3)
        ]
        #: Seconds each start-up phase took, for the session's summary.
        self.timings: dict[str, float] = {}

    @property
    def url(self) -> str:
        """The run store's URL: the three sentinels and the primary's name, database 0."""
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{PRIMARY_NAME}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)

    def start(self) -> None:
        started = time.monotonic()
        primary, replica = self.servers
        for process in (*self.servers, *self.sentinels):
            process.dir.mkdir(parents=True)
        self._start(primary)
        self._start(replica, "--replicaof", "127.0.0.1", str(primary.port))
        for sentinel in self.sentinels:
            (sentinel.dir / "sentinel.conf").write_text(
                f"port {sentinel.port}\nbind 127.0.0.1\ndir {sentinel.dir}\n"
                f"sentinel monitor {PRIMARY_NAME} 127.0.0.1 {primary.port} 2\n"
                f"sentinel down-after-milliseconds {PRIMARY_NAME} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {PRIMARY_NAME} {FAILOVER_TIMEOUT_MS}\n"
            )
            self._start(sentinel)
        self.timings["processes_s"] = time.monotonic() - started
        self.timings["agreed_s"] = self.wait_whole()

    def _start(self, process: Process, *options: str) -> None:
        if process.sentinel:
            command = ["redis-server", str(process.dir / "sentinel.conf"), "--sentinel"]
        else:
            command = ["redis-server", "--port", str(process.port), "--bind", "127.0.0.1", "--dir", str(process.dir)]
            # Nothing on disk; a replica syncs at once instead of after the default 5 s wait for more.
            command += ["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", *options]
        with (process.dir / "console.log").open("ab") as console:
            process.popen = subprocess.Popen(
                [*command, "--logfile", "redis.log"],
                cwd=process.dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def up() -> bool:
            if process.popen is None or process.popen.poll() is not None:
                tail = (process.dir / "redis.log").read_text(errors="replace")[-2000:]
                raise SentinelSetupError(f"Redis on port {process.port} exited while starting:\n{tail}")
            try:
                return bool(self.client(process.port).ping())
            except redis.ConnectionError:
                return False

        wait_for(up, f"Redis on port {process.port} to answer", START_TIMEOUT_S)

    def server(self, port: int) -> Process:
        return next(process for process in self.servers if process.port == port)

    def primary_port(self) -> int:
        """The primary's port as the sentinels say."""
        for sentinel in self.sentinels:
            try:
                address = cast(
                    tuple[str, int], self.client(sentinel.port).sentinel_get_master_addr_by_name(PRIMARY_NAME)
                )
                return int(address[1])
            except (redis.ConnectionError, TypeError):
                continue
        raise SentinelSetupError("no sentinel answers")

    def whole(self) -> bool:
        """Every sentinel sees the primary with its replica in sync and the two other sentinels."""
        try:
            primary = self.primary_port()
            info = self.client(primary).info("replication")
            if info.get("role") != "master" or info.get("connected_slaves") != 1 or info["slave0"]["state"] != "online":
                return False
            for sentinel in self.sentinels:
                state = cast(dict[str, Any], self.client(sentinel.port).sentinel_master(PRIMARY_NAME))
                if (
                    int(state["num-slaves"]) != 1
                    or int(state["num-other-sentinels"]) != 2
                    or int(state["port"]) != primary
                ):
                    return False
                if "s_down" in state["flags"] or "o_down" in state["flags"]:
                    return False
        except (redis.ConnectionError, KeyError):
            return False
        return True

    def wait_whole(self, timeout_s: float = START_TIMEOUT_S) -> float:
        return wait_for(self.whole, "the primary, its replica in sync and three sentinels to agree", timeout_s)

    def kill(self, port: int) -> None:
        """SIGKILL the server on ``port`` (nothing flushed); returns once it is gone."""
        process = self.server(port)
        if process.popen is None:
            raise SentinelSetupError(f"Redis on port {port} is not running: nothing to kill")
        os.kill(process.popen.pid, signal.SIGKILL)
        process.popen.wait(timeout=30)
        process.popen = None

    def wait_promoted(self, former_primary: int, timeout_s: float = FAILOVER_TIMEOUT_S) -> int:
        """Wait until the sentinels name another primary than ``former_primary`` and it serves as one."""

        def promoted() -> bool:
            port = self.primary_port()
            return port != former_primary and self.client(port).info("replication").get("role") == "master"

        wait_for(promoted, f"a replica of port {former_primary} to be promoted", timeout_s)
        return self.primary_port()

    def ensure_whole(self) -> None:
        """Restart a killed server (the sentinels make it a replica of the primary now), then wait."""
        for process in self.servers:
            if process.popen is None or process.popen.poll() is not None:
                self._start(process)
        self.wait_whole(FAILOVER_TIMEOUT_S)

    def close(self) -> None:
        for process in (*self.sentinels, *self.servers):
            if process.popen is not None and process.popen.poll() is None:
                os.kill(process.popen.pid, signal.SIGKILL)
                process.popen.wait(timeout=30)
            process.popen = None
