"""A three-node RabbitMQ 3.10 cluster on this machine, each node in a network namespace of its own.

Why namespaces: a real partition needs a network to cut, and this machine has no iptables. Every node
runs in its own namespace with two interfaces: one on a *distribution* bridge that carries only the
nodes' Erlang traffic (node names are long names on those addresses, ``pc1@10.213.0.1``), one on a
*client* bridge that this host's clients reach it through (``amqp://guest:guest@10.213.1.1:5672``).
:meth:`RabbitCluster.partition` takes a node's distribution link down: its packets to and from the
other nodes vanish silently, as on a failed switch port, the Erlang distribution notices after
``net_ticktime``, and clients can still reach the cut-off node and see what it does (with
``pause_minority`` it stops its listeners). Each namespace has its own ports, so every node uses the
standard 5672 and 25672 and its own ``epmd``.

Why not ``/usr/sbin/rabbitmq-server``: run as root, Debian's wrapper starts the node through ``su
rabbitmq``, whose PAM session (``pam_limits``) sets the open-file limit back to 1,024, so the node
caps itself at 927 file handles (about 300 quorum queues) whatever ``ulimit -n`` said before. The
nodes here run the script under the wrapper as the ``rabbitmq`` user through ``setpriv`` (no PAM) with
``ulimit -n`` raised to the hard limit. Each node reads a ``rabbitmq-env.conf`` of its own, not the
machine's (which binds ``epmd`` and the distribution to 127.0.0.1), and the cluster has an Erlang
cookie of its own, so it can never talk to the machine's shared node.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import shutil
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.cluster.local_slot import RABBIT_NODES, Slot, ip, sweep_rabbit, wait_for

SBIN = Path("/usr/lib/rabbitmq/bin")
#: Open files wanted per node (what production packages set); capped at this machine's hard limit.
NOFILE_WANTED = 65536
AMQP_PORT = 5672
BOOT_TIMEOUT_S = 90.0
#: Longest a partition or a node loss may take to show in the cluster's view.
CLUSTER_VIEW_TIMEOUT_S = 60.0
#: What a RabbitMQ 3.10.8 node logs when its boot waits on an Erlang ``global`` sync that never returns.
#: It then sends ``global`` the pre-Erlang-25 form of a fake nodedown/nodeup, which Erlang 25 ignores, so
#: the node stays stuck in its boot for good (rabbitmq-server#6034, fixed in 3.10.9 and 3.11.1). Debian
#: 12 ships exactly that pair: here it met 6 of 47 heals of a lightly loaded cluster, 2 of 6 under load.
GLOBAL_HANG = "Global hang workaround"
#: Restarts of a node stuck in that hang before giving up on it.
HANG_RESTARTS = 2


class ClusterError(RuntimeError):
    """A node did not start, a CLI command failed, or there is no node to ask."""


def port_open(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Rejoined:
    """How a healed node came back: the seconds it took, and its restarts out of :data:`GLOBAL_HANG`."""

    seconds: float
    restarts: int

    def note(self) -> str:
        """The words a test's figures add when the node had to be restarted."""
        if not self.restarts:
            return ""
        hang = "its boot hung in Erlang's global sync, RabbitMQ 3.10.8's known hang"
        return f" ({hang}: SIGKILLed and started {self.restarts}x)"


@dataclass
class RabbitNode:
    """One node: its Erlang name, its namespace, the address clients use, its own directory."""

    index: int
    name: str
    netns: str
    host: str
    dir: Path
    port: int = AMQP_PORT
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: Where the node's log stood when it last started or was reconnected: a hang is looked for after it.
    log_mark: int = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    @property
    def log(self) -> Path:
        return self.dir / "log" / f"{self.name}.log"

    def serving(self) -> bool:
        """Whether the node accepts AMQP connections (a paused node closes its listener)."""
        return port_open(self.host, self.port)

    def mark_log(self) -> None:
        self.log_mark = self.log.stat().st_size if self.log.exists() else 0

    def hung(self) -> bool:
        """Whether the node logged :data:`GLOBAL_HANG` since :meth:`mark_log`."""
        if not self.log.exists():
            return False
        with self.log.open("rb") as log:
            log.seek(self.log_mark)
            return GLOBAL_HANG.encode() in log.read()


class RabbitCluster:
    """Starts, breaks and mends the slot's three-node cluster; :meth:`close` removes every trace.

    Args:
        slot: where the cluster lives (names, addresses, directory).
        partition_handling: RabbitMQ's ``cluster_partition_handling``; ``pause_minority`` (what a
            three-node production cluster runs) makes a cut-off node stop serving.
        net_ticktime_s: how long a silent peer takes to be declared down (RabbitMQ's default is 60 s;
            10 s keeps partition tests short without false alarms on a loaded two-core machine).
    """

    def __init__(self, slot: Slot, *, partition_handling: str = "pause_minority", net_ticktime_s: int = 10) -> None:
        self.slot = slot
        self.base = slot.dir / "rabbit"
        self.partition_handling = partition_handling
        self.net_ticktime_s = net_ticktime_s
        self.nofile = min(NOFILE_WANTED, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        self.nodes = [
            RabbitNode(
                index=k,
                name=f"pc{k}@{slot.dist_address(k)}",
                netns=slot.netns(k),
                host=slot.client_address(k),
                dir=self.base / f"pc{k}",
            )
            for k in range(1, RABBIT_NODES + 1)
        ]
        #: Seconds each start-up phase took, for the session's summary.
        self.timings: dict[str, float] = {}
        #: Nodes killed and started again because their boot was stuck in :data:`GLOBAL_HANG`, in order.
        self.hang_restarts: list[str] = []

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def node(self, name: str) -> RabbitNode:
        return next(node for node in self.nodes if node.name == name)

    # --- start-up -------------------------------------------------------------------------------

    def start(self) -> None:
        """Build the network, boot the three nodes in parallel, join the second and third to the first."""
        started = time.monotonic()
        self._build_network()
        self._write_files()
        self.timings["network_s"] = time.monotonic() - started
        for node in self.nodes:
            self.start_node(node)
        for node in self.nodes:
            self.wait_booted(node)
        self.timings["boot_s"] = time.monotonic() - started - self.timings["network_s"]
        joined = time.monotonic()
        seed = self.nodes[0]
        for node in self.nodes[1:]:
            self.ctl(node, "stop_app")
            self.ctl(node, "join_cluster", seed.name)
            self.ctl(node, "start_app")
        self.wait_running({node.name for node in self.nodes})
        self.timings["join_s"] = time.monotonic() - joined
        self.timings["total_s"] = time.monotonic() - started

    def _build_network(self) -> None:
        slot = self.slot
        for bridge in (slot.dist_bridge, slot.client_bridge):
            ip("link", "add", bridge, "type", "bridge")
            ip("link", "set", bridge, "up")
        ip("addr", "add", f"{slot.host_client_address}/24", "dev", slot.client_bridge)
        for node in self.nodes:
            k = node.index
            ip("netns", "add", node.netns)
            ip("-n", node.netns, "link", "set", "lo", "up")
            for host_end, inner, bridge, address in (
                (slot.dist_link(k), "dist0", slot.dist_bridge, slot.dist_address(k)),
                (slot.client_link(k), "amqp0", slot.client_bridge, slot.client_address(k)),
            ):
                ip("link", "add", host_end, "type", "veth", "peer", "name", inner, "netns", node.netns)
                ip("link", "set", host_end, "master", bridge, "up")
                ip("-n", node.netns, "addr", "add", f"{address}/24", "dev", inner)
                ip("-n", node.netns, "link", "set", inner, "up")

    def _write_files(self) -> None:
        home = self.base / "home"
        home.mkdir(parents=True)
        cookie = home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(20).upper())
        cookie.chmod(0o400)
        for node in self.nodes:
            node.dir.mkdir(parents=True)
            (node.dir / "rabbitmq.conf").write_text(
                f"listeners.tcp.default = {AMQP_PORT}\n"
                "loopback_users = none\n"  # clients reach the nodes over the client bridge, not loopback
                f"cluster_partition_handling = {self.partition_handling}\n"
                f"net_ticktime = {self.net_ticktime_s}\n"
            )
            (node.dir / "rabbitmq-env.conf").write_text("# this node's own settings are all in its environment\n")
        shutil.chown(self.base, "rabbitmq", "rabbitmq")
        for path in self.base.rglob("*"):
            shutil.chown(path, "rabbitmq", "rabbitmq")

    def _env(self, node: RabbitNode) -> dict[str, str]:
        return {
            "PATH": "/usr/sbin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": str(self.base / "home"),  # where the cluster's cookie is, for the server and the CLI
            "RABBITMQ_CONF_ENV_FILE": str(node.dir / "rabbitmq-env.conf"),
            "RABBITMQ_USE_LONGNAME": "true",
            "RABBITMQ_NODENAME": node.name,
            "RABBITMQ_CONFIG_FILE": str(node.dir / "rabbitmq.conf"),
            "RABBITMQ_MNESIA_BASE": str(node.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(node.dir / "log"),
            "RABBITMQ_PID_FILE": str(node.dir / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(node.dir / "enabled_plugins"),  # none: no plugin ports
        }

    # --- one node -------------------------------------------------------------------------------

    def start_node(self, node: RabbitNode) -> None:
        """Start a node's server (returns at once; :meth:`wait_booted` waits for it)."""
        node.mark_log()
        with (node.dir / "console.log").open("ab") as console:
            node.process = subprocess.Popen(
                [
                    *("ip", "netns", "exec", node.netns),
                    *("setpriv", "--reuid=rabbitmq", "--regid=rabbitmq", "--init-groups", "--"),
                    *("sh", "-c", f'ulimit -n {self.nofile} && exec "$0"', str(SBIN / "rabbitmq-server")),
                ],
                env=self._env(node),
                cwd=node.dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C goes to pytest, whose teardown removes the node
            )

    def wait_booted(self, node: RabbitNode, timeout_s: float = BOOT_TIMEOUT_S) -> float:
        """Wait until the node serves AMQP; returns the seconds it took.

        A node that exits meanwhile fails with its log's tail. A node whose boot is stuck in
        :data:`GLOBAL_HANG` is SIGKILLed and started again, as its operator would (counted in
        :attr:`hang_restarts`), at most :data:`HANG_RESTARTS` times.
        """
        started = time.monotonic()
        for _ in range(HANG_RESTARTS):
            if self._serving_unless_hung(node, timeout_s):
                break
            self.hang_restarts.append(node.name)
            self.kill(node)
            self.start_node(node)
        else:
            if not self._serving_unless_hung(node, timeout_s):
                raise ClusterError(f"{node.name} hung in its boot ({GLOBAL_HANG!r} in {node.log}) after restarts")
        self.ctl(node, "await_startup")
        return time.monotonic() - started

    def _serving_unless_hung(self, node: RabbitNode, timeout_s: float) -> bool:
        """Wait until the node serves (True) or logs the hang (False)."""

        def up_or_hung() -> bool:
            if node.process is None or node.process.poll() is not None:
                tail = (node.dir / "console.log").read_text(errors="replace")[-2000:]
                raise ClusterError(f"RabbitMQ node {node.name} exited while starting:\n{tail}")
            return node.serving() or node.hung()

        wait_for(up_or_hung, f"{node.name} to serve AMQP on {node.host}:{node.port}", timeout_s, 0.1)
        return node.serving()

    def beam_pid(self, node: RabbitNode) -> int | None:
        """The node's Erlang VM, the one ``beam.smp`` in its namespace (None when it is not running)."""
        for pid in ip("netns", "pids", node.netns).stdout.split():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "beam.smp":
                    return int(pid)
            except OSError:
                continue
        return None

    def kill(self, node: RabbitNode) -> None:
        """SIGKILL the node's VM, as a lost machine or the OOM killer would; returns once it is gone."""
        pid = self.beam_pid(node)
        if pid is None:
            raise ClusterError(f"{node.name} is not running: nothing to kill")
        os.kill(pid, 9)
        self._reap(node)

    def stop(self, node: RabbitNode) -> None:
        """Stop the node cleanly (``rabbitmqctl stop``: leaders hand over, connections close)."""
        self.ctl(node, "stop")
        self._reap(node)

    def _reap(self, node: RabbitNode) -> None:
        if node.process is not None:
            node.process.wait(timeout=60)  # the server script exits when the VM does
            node.process = None
        wait_for(lambda: self.beam_pid(node) is None, f"{node.name}'s VM to exit", 30)

    def restart(self, node: RabbitNode) -> float:
        """Start a stopped or killed node again and wait until the cluster counts it; returns seconds."""
        started = time.monotonic()
        self.start_node(node)
        self.wait_booted(node)
        self.wait_running({n.name for n in self.nodes}, via=node)
        return time.monotonic() - started

    def running(self, node: RabbitNode) -> bool:
        return node.process is not None and node.process.poll() is None

    # --- partitions -----------------------------------------------------------------------------

    def partition(self, node: RabbitNode) -> None:
        """Cut the node off from the other nodes (its distribution link goes down); clients still reach it."""
        ip("link", "set", self.slot.dist_link(node.index), "down")

    def heal(self, node: RabbitNode) -> None:
        """Bring the node's distribution link back (:meth:`wait_rejoined` waits for it to serve again)."""
        node.mark_log()
        ip("link", "set", self.slot.dist_link(node.index), "up")

    def wait_rejoined(self, node: RabbitNode) -> Rejoined:
        """Wait until a healed node serves again and the others count it running. A paused node boots
        RabbitMQ again when it sees a majority, and may hang doing so: see :meth:`wait_booted`."""
        started, restarts_before = time.monotonic(), len(self.hang_restarts)
        self.wait_booted(node)
        self.wait_running({n.name for n in self.nodes}, via=next(n for n in self.nodes if n is not node))
        return Rejoined(time.monotonic() - started, len(self.hang_restarts) - restarts_before)

    def partitioned(self, node: RabbitNode) -> bool:
        return "state DOWN" in ip("link", "show", self.slot.dist_link(node.index)).stdout

    # --- what the cluster says ------------------------------------------------------------------

    def ctl(self, node: RabbitNode, *args: str, tool: str = "rabbitmqctl", timeout_s: float = 120) -> str:
        """Run a RabbitMQ CLI command against ``node`` from inside its namespace; returns its stdout."""
        done = subprocess.run(
            ["ip", "netns", "exec", node.netns, str(SBIN / tool), "-q", "--longnames", "-n", node.name, *args],
            env=self._env(node),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode != 0:
            raise ClusterError(f"`{tool} {' '.join(args)}` on {node.name} failed: {done.stderr.strip()[-1500:]}")
        return done.stdout

    def _via(self, via: RabbitNode | None) -> RabbitNode:
        if via is not None:
            return via
        for node in self.nodes:
            if self.running(node) and not self.partitioned(node) and node.serving():
                return node
        raise ClusterError("no node of the cluster is serving")

    def running_nodes(self, via: RabbitNode | None = None) -> set[str]:
        """The nodes ``via`` (a serving node by default) sees running in its cluster.

        While a partition is not yet detected (``net_ticktime``) this blocks on the unreachable node:
        wait for what a client sees first (:meth:`RabbitNode.serving`).
        """
        status = json.loads(self.ctl(self._via(via), "cluster_status", "--formatter", "json"))
        return set(status["running_nodes"])

    def wait_running(
        self, names: set[str], via: RabbitNode | None = None, timeout_s: float = CLUSTER_VIEW_TIMEOUT_S
    ) -> float:
        """Wait until ``via`` sees exactly ``names`` running; returns the seconds it took."""
        return wait_for(
            lambda: self.running_nodes(via) == names, f"running nodes to be {sorted(names)}", timeout_s, 0.5
        )

    def quorum_queues(self, via: RabbitNode | None = None) -> list[dict[str, Any]]:
        """Every quorum queue with its ``leader``, ``members`` and ``online`` members."""
        listed = self.ctl(
            self._via(via), "list_queues", "name", "type", "leader", "members", "online", "--formatter", "json"
        )
        return [queue for queue in json.loads(listed) if queue["type"] == "quorum"]

    def leader_counts(self, via: RabbitNode | None = None) -> Counter[str]:
        """How many quorum-queue leaders each node holds."""
        return Counter(str(queue["leader"]) for queue in self.quorum_queues(via))

    def busiest_node(self, via: RabbitNode | None = None) -> RabbitNode:
        """The node holding the most quorum-queue leaders (the one whose loss moves the most)."""
        counts = self.leader_counts(via)
        if not counts:
            raise ClusterError("the cluster has no quorum queue: no leader to count")
        return self.node(counts.most_common(1)[0][0])

    # --- between tests and at the end -----------------------------------------------------------

    def ensure_healthy(self) -> None:
        """Heal every partition and restart every stopped node, so each test starts on a whole cluster."""
        for node in self.nodes:
            if self.partitioned(node):
                self.heal(node)  # a node paused by pause_minority resumes by itself once it sees the others
        for node in self.nodes:
            if not self.running(node):
                stray = self.beam_pid(node)
                if stray is not None:  # a VM whose server script we lost track of
                    os.kill(stray, 9)
                    self._reap(node)
                self.start_node(node)
        for node in self.nodes:
            self.wait_booted(node)  # a healed node boots again too, and may hang doing so
        self.wait_running({node.name for node in self.nodes})

    def close(self) -> None:
        """Kill the nodes, delete the namespaces, bridges and files."""
        sweep_rabbit(self.slot)
        for node in self.nodes:
            if node.process is not None:
                node.process.wait(timeout=30)
                node.process = None
