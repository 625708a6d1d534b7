"""Where the local test clusters live, who owns them, and how every trace of them is removed.

A *slot* (``PIPELINES_TEST_CLUSTER_SLOT``, 0 to 9, default 0) fixes every name the clusters use: the
network namespaces and bridges of the RabbitMQ nodes, their addresses, the Redis ports and the
directory under ``/tmp``. Two test sessions on one machine pick different slots to run side by side;
one session holds its slot's lock (a ``flock`` the kernel releases when the process dies, however it
dies), so a second session on the same slot is refused instead of destroying the first one's clusters.

Everything a slot starts is found again without a record of it: every process inside the slot's
network namespaces, and every Redis server whose working directory is under the slot's directory.
:func:`sweep` kills those and deletes the namespaces, bridges and files. It runs at the start of a
session (a leftover from a session that was killed), at its end, and from a guardian process that
outlives the session: the guardian waits for its stdin to close, which happens when the session's
process exits for any reason (SIGKILL and ``timeout`` included), then sweeps.

This module uses the standard library only: the guardian runs it as a script.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path("/tmp/pipelines-clusters")
#: RabbitMQ nodes of the local cluster.
RABBIT_NODES = 3
#: Redis Cluster servers: three primaries, one replica each.
REDIS_SERVERS = 6
#: Longest a sweep waits for a killed process to be gone.
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class Slot:
    """The names, addresses, ports and directories of one slot's clusters."""

    number: int

    @classmethod
    def from_env(cls) -> Slot:
        raw = os.environ.get("PIPELINES_TEST_CLUSTER_SLOT", "0")
        if not raw.isdigit() or int(raw) > 9:
            raise ValueError(f"PIPELINES_TEST_CLUSTER_SLOT={raw!r}: expected a number from 0 to 9")
        return cls(int(raw))

    @property
    def dir(self) -> Path:
        return ROOT / f"slot-{self.number}"

    @property
    def lock_path(self) -> Path:
        return ROOT / f"slot-{self.number}.lock"

    @property
    def prefix(self) -> str:
        # Interface names are limited to 15 characters: "pcl0-dist" and "pcl0-d3" leave room.
        return f"pcl{self.number}"

    def netns(self, node: int) -> str:
        return f"{self.prefix}-rabbit{node}"

    @property
    def dist_bridge(self) -> str:
        """The bridge that carries the nodes' Erlang distribution traffic (the one a partition cuts)."""
        return f"{self.prefix}-dist"

    @property
    def client_bridge(self) -> str:
        """The bridge between the nodes and this host's clients (a partition leaves it up)."""
        return f"{self.prefix}-amqp"

    def dist_link(self, node: int) -> str:
        return f"{self.prefix}-d{node}"

    def client_link(self, node: int) -> str:
        return f"{self.prefix}-a{node}"

    def dist_address(self, node: int) -> str:
        return f"10.213.{2 * self.number}.{node}"

    def client_address(self, node: int) -> str:
        return f"10.213.{2 * self.number + 1}.{node}"

    @property
    def host_client_address(self) -> str:
        return f"10.213.{2 * self.number + 1}.254"

    def redis_port(self, server: int) -> int:
        """Port of Redis server ``server`` (0-based); its cluster bus is this port + 10000."""
        return 7100 + 10 * self.number + server

    def sentinel_port(self, sentinel: int) -> int:
        """Port of Redis Sentinel ``sentinel`` (0-based) of the slot's primary with a replica."""
        return 26400 + 10 * self.number + sentinel

    @property
    def redis_dir(self) -> Path:
        return self.dir / "redis"


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float, interval_s: float = 0.1) -> float:
    """Poll ``condition`` until true (a process or a cluster state has nothing to subscribe to); its seconds.

    Raises:
        TimeoutError: naming ``what`` was awaited, after ``timeout_s`` seconds.
    """
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
    return time.monotonic() - started


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run an iproute2 command; a failure raises with ip's own message."""
    done = subprocess.run(["ip", *args], check=False, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done


def _netns_pids(name: str) -> list[int]:
    listed = ip("netns", "pids", name, check=False)
    return [int(pid) for pid in listed.stdout.split()] if listed.returncode == 0 else []


def _pids_with_cwd_under(directory: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd.startswith(f"{directory}/"):
            found.append(int(entry.name))
    return found


def _kill_and_wait(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while any(Path(f"/proc/{pid}").exists() and not _is_zombie(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} still alive {KILL_WAIT_S} s after SIGKILL")
        time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def sweep_rabbit(slot: Slot) -> None:
    """Kill every process in the slot's namespaces, delete the namespaces, links, bridges and files."""
    for node in range(1, RABBIT_NODES + 1):
        _kill_and_wait(_netns_pids(slot.netns(node)))
        ip("netns", "delete", slot.netns(node), check=False)
        # Deleting a namespace destroys its ends of the veth pairs, and so the pairs; a namespace
        # still pinned for a moment could leave them, and a new pair of the same name would fail.
        ip("link", "delete", slot.dist_link(node), check=False)
        ip("link", "delete", slot.client_link(node), check=False)
    ip("link", "delete", slot.dist_bridge, check=False)
    ip("link", "delete", slot.client_bridge, check=False)
    shutil.rmtree(slot.dir / "rabbit", ignore_errors=True)


def sweep_redis(slot: Slot) -> None:
    """Kill every Redis server of the slot (found by its working directory) and delete its files."""
    _kill_and_wait(_pids_with_cwd_under(slot.redis_dir))
    shutil.rmtree(slot.redis_dir, ignore_errors=True)


def sweep(slot: Slot) -> None:
    """Remove everything the slot's clusters left on the machine (nothing if nothing is there)."""
    sweep_rabbit(slot)
    sweep_redis(slot)
    shutil.rmtree(slot.dir, ignore_errors=True)


class SlotBusyError(RuntimeError):
    """Another live test session holds the slot."""


class Ownership:
    """This session's hold on a slot: the lock, and the guardian that sweeps if the session dies."""

    def __init__(self, slot: Slot) -> None:
        self.slot = slot
        ROOT.mkdir(parents=True, exist_ok=True)
        self._lock: IO[str] = slot.lock_path.open("a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "unknown"
            self._lock.close()
            raise SlotBusyError(
                f"the local test clusters of slot {slot.number} are in use by process {holder}; wait for it "
                "to finish, or run this session on another slot (PIPELINES_TEST_CLUSTER_SLOT=1..9)"
            ) from None
        self._lock.truncate(0)
        self._lock.write(f"{os.getpid()}\n")
        self._lock.flush()
        sweep(slot)  # what a session that died on this slot left behind
        slot.dir.mkdir(parents=True)
        with (ROOT / f"slot-{slot.number}.guardian.log").open("ab") as log:
            self._guardian = subprocess.Popen(
                [sys.executable, __file__, str(slot.number)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal must not reach it before the session's teardown
            )

    def release(self) -> None:
        """Sweep the slot (through the guardian, which then exits) and give up the lock."""
        assert self._guardian.stdin is not None
        self._guardian.stdin.close()
        try:
            self._guardian.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._guardian.kill()
            self._guardian.wait()
        sweep(self.slot)  # idempotent: covers a guardian that died early
        self._lock.close()


def _guard(slot: Slot) -> None:
    """Wait for the session to end (stdin closes), then sweep its slot."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.stdin.buffer.read()
    sweep(slot)


if __name__ == "__main__":
    _guard(Slot(int(sys.argv[1])))
