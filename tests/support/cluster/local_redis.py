"""A Redis Cluster on this machine: three primaries with one replica each, on the slot's loopback ports.

Each server runs in the foreground as a child of the test session, in a directory of its own under the
slot's (that working directory is how a sweep finds it again), with nothing persisted but its
``nodes.conf``: a restarted server rejoins the cluster, as a replica if it was failed over meanwhile.
``cluster-node-timeout`` is 3 s instead of 15 s, so a primary's loss is noticed and its replica
promoted within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.support.cluster.local_slot import REDIS_SERVERS, Slot, sweep_redis, wait_for

NODE_TIMEOUT_MS = 3000
START_TIMEOUT_S = 30.0
#: Longest a replica's promotion may take (node timeout, election, a loaded machine).
FAILOVER_TIMEOUT_S = 45.0


class RedisClusterError(RuntimeError):
    """A server did not start or is not there to kill."""


def _covers(span: str, slot: int) -> bool:
    """Whether a ``CLUSTER NODES`` slot field (``5461-10922`` or ``42``; ``[...]`` while migrating) holds ``slot``."""
    if span.startswith("["):
        return False
    first, _, last = span.partition("-")
    return int(first) <= slot <= int(last or first)


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``: who a server is, what it serves, whom it replicates."""

    id: str
    port: int
    flags: frozenset[str]
    primary_id: str | None
    slots: tuple[str, ...]

    @property
    def is_primary(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return "fail" in self.flags or "fail?" in self.flags

    @classmethod
    def parse(cls, line: str) -> ClusterNode:
        fields = line.split()
        return cls(
            id=fields[0],
            port=int(fields[1].split("@")[0].rsplit(":", 1)[1]),
            flags=frozenset(fields[2].split(",")),
            primary_id=None if fields[3] == "-" else fields[3],
            slots=tuple(fields[8:]),
        )


@dataclass
class RedisServer:
    port: int
    dir: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


class LocalRedisCluster:
    """Starts the slot's six servers, creates the cluster, kills and restarts servers, then removes it all."""

    def __init__(self, slot: Slot, *, node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        self.slot = slot
        self.node_timeout_ms = node_timeout_ms
        self.servers = [
            RedisServer(port=slot.redis_port(i), dir=slot.redis_dir / str(slot.redis_port(i)))
            for i in range(REDIS_SERVERS)
        ]
        #: Seconds each start-up phase took, for the session's summary.
        self.timings: dict[str, float] = {}

    @property
    def url(self) -> str:
        """A URL of one server: enough for a cluster client to discover the others."""
        return f"redis://127.0.0.1:{self.servers[0].port}/0"

    def server(self, port: int) -> RedisServer:
        return next(server for server in self.servers if server.port == port)

    def client(self, port: int) -> redis.Redis:
        """A plain client of one server (no redirections followed)."""
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)

    # --- start-up -------------------------------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        for server in self.servers:
            server.dir.mkdir(parents=True)
            self.start_server(server)
        for server in self.servers:
            self.wait_answering(server)
        self.timings["servers_s"] = time.monotonic() - started
        created = time.monotonic()
        addresses = [f"127.0.0.1:{server.port}" for server in self.servers]
        done = subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RedisClusterError(f"`redis-cli --cluster create` failed:\n{done.stdout[-2000:]}{done.stderr}")
        self.wait_healthy()
        self.timings["create_s"] = time.monotonic() - created
        self.timings["total_s"] = time.monotonic() - started

    def start_server(self, server: RedisServer) -> None:
        with (server.dir / "console.log").open("ab") as console:
            server.process = subprocess.Popen(
                [
                    *("redis-server", "--port", str(server.port), "--bind", "127.0.0.1", "--dir", str(server.dir)),
                    *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                    *("--cluster-node-timeout", str(self.node_timeout_ms)),
                    *("--save", "", "--appendonly", "no", "--logfile", "redis.log"),
                    # A replica syncs at once instead of after the default 5 s wait for more replicas:
                    # one that has not synced yet cannot be promoted.
                    *("--repl-diskless-sync-delay", "0"),
                ],
                cwd=server.dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C goes to pytest, whose teardown removes the server
            )

    def answering(self, server: RedisServer) -> bool:
        try:
            return bool(self.client(server.port).ping())
        except redis.ConnectionError:
            return False

    def wait_answering(self, server: RedisServer) -> None:
        def up() -> bool:
            if server.process is None or server.process.poll() is not None:
                tail = (server.dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RedisClusterError(f"Redis on port {server.port} exited while starting:\n{tail}")
            return self.answering(server)

        wait_for(up, f"Redis on port {server.port} to answer", START_TIMEOUT_S)

    # --- what the cluster says ------------------------------------------------------------------

    def view(self, port: int) -> list[ClusterNode]:
        """The cluster as the server on ``port`` sees it (``CLUSTER NODES``)."""
        text = subprocess.run(
            ["redis-cli", "-p", str(port), "cluster", "nodes"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
        return [ClusterNode.parse(line) for line in text.splitlines() if line.strip()]

    def state_ok(self, port: int) -> bool:
        try:
            info = self.client(port).cluster("INFO")
        except redis.ConnectionError:
            return False
        return isinstance(info, dict) and info.get("cluster_state") == "ok"  # redis-py parses the reply

    def primaries(self, port: int | None = None) -> dict[int, list[int]]:
        """Each primary serving slots, with the ports of its replicas, as a live server sees it."""
        nodes = [n for n in self.view(port or self._live_port()) if not n.failed]
        by_id = {node.id: node for node in nodes}
        primaries: dict[int, list[int]] = {node.port: [] for node in nodes if node.is_primary and node.slots}
        for node in nodes:
            if node.primary_id is not None and node.primary_id in by_id:
                primaries.setdefault(by_id[node.primary_id].port, []).append(node.port)
        return {primary: sorted(replicas) for primary, replicas in primaries.items()}

    def primary_of(self, key: str, *, via: int | None = None) -> int:
        """The port of the primary serving ``key``'s hash slot, as the server on ``via`` (else the first
        live one) sees it. Right after a failover, servers learn of it by gossip, not all at once."""
        slot = key_slot(key.encode())
        for node in self.view(via if via is not None else self._live_port()):
            if node.is_primary and not node.failed and any(_covers(span, slot) for span in node.slots):
                return node.port
        raise RedisClusterError(f"no live primary serves slot {slot} of {key!r}")

    def _live_port(self) -> int:
        for server in self.servers:
            if self.running(server) and self.answering(server):
                return server.port
        raise RedisClusterError("no Redis server of the cluster answers")

    def running(self, server: RedisServer) -> bool:
        return server.process is not None and server.process.poll() is None

    def replica_in_sync(self, port: int) -> bool:
        """Whether the server on ``port`` is a replica whose link to its primary is up (it has synced)."""
        info = self.client(port).info("replication")
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def healthy(self) -> bool:
        """Every server up and ``cluster_state:ok``; three primaries, each with one replica in sync."""
        if not all(self.running(s) and self.state_ok(s.port) for s in self.servers):
            return False
        layout = self.primaries()
        return len(layout) == REDIS_SERVERS // 2 and all(
            len(replicas) == 1 and self.replica_in_sync(replicas[0]) for replicas in layout.values()
        )

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> float:
        return wait_for(self.healthy, "the Redis Cluster to be whole (3 primaries, 1 replica each)", timeout_s)

    # --- faults ---------------------------------------------------------------------------------

    def kill(self, port: int) -> None:
        """SIGKILL one server (no shutdown, nothing flushed); returns once it is gone."""
        server = self.server(port)
        if server.process is None:
            raise RedisClusterError(f"Redis on port {port} is not running: nothing to kill")
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
        server.process = None

    def wait_promoted(self, former_primary: int, replicas: list[int], timeout_s: float = FAILOVER_TIMEOUT_S) -> int:
        """Wait until one of ``replicas`` of the lost ``former_primary`` is a primary serving slots; its port."""

        def promoted() -> int | None:
            for port in replicas:
                if not self.state_ok(port):
                    continue
                layout = self.primaries(port)
                if port in layout and former_primary not in layout:
                    return port
            return None

        wait_for(lambda: promoted() is not None, f"a replica of port {former_primary} to be promoted", timeout_s)
        port = promoted()
        assert port is not None
        return port

    def restart(self, port: int) -> None:
        """Start a killed server again; it rejoins from its ``nodes.conf`` (as a replica if failed over)."""
        server = self.server(port)
        self.start_server(server)
        self.wait_answering(server)

    def ensure_healthy(self) -> None:
        """Restart every stopped server and wait for a whole cluster, so each test starts on one."""
        for server in self.servers:
            if not self.running(server):
                self.restart(server.port)
        self.wait_healthy(FAILOVER_TIMEOUT_S)

    def close(self) -> None:
        sweep_redis(self.slot)
        for server in self.servers:
            if server.process is not None:
                server.process.wait(timeout=30)
                server.process = None
