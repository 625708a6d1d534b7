"""A RabbitMQ node of a test's own, on loopback on free ports, with server settings the shared node must
not get (a consumer timeout of seconds).

Started as ``tests/support/cluster/local_rabbit.py`` starts its nodes, without the network namespaces:
``rabbitmq-server`` as the ``rabbitmq`` user through ``setpriv`` (no PAM session resetting the open-file
limit) with ``ulimit -n`` raised, its own environment and config files, its own Erlang cookie, and its
own directory, removed with the node. Needs root and the Debian package ``rabbitmq-server``.
"""

from __future__ import annotations

import resource
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port

SBIN = Path("/usr/lib/rabbitmq/bin")
NOFILE_WANTED = 65536
BOOT_TIMEOUT_S = 90.0


class OwnRabbit:
    """One node: :meth:`start`, :meth:`ctl`, :meth:`log`, :meth:`close` (which removes every trace)."""

    def __init__(self, *, consumer_timeout_ms: int = 1_800_000, management: bool = False) -> None:
        self.port = free_port()
        self.management_port = free_port() if management else None
        """The management API's port (its plugin enabled), or None."""
        self.dist_port = free_port()
        self.name = f"own{self.port}@localhost"
        self.dir = Path(tempfile.mkdtemp(prefix="own-rabbit-"))
        self.consumer_timeout_ms = consumer_timeout_ms
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def _env(self) -> dict[str, str]:
        d = self.dir
        return {
            "PATH": "/usr/sbin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": str(d / "home"),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PID_FILE": str(d / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_NODE_PORT": str(self.port),
        }

    def start(self) -> None:
        """Write the node's files, boot it, and make it check consumer timeouts every second."""
        home = self.dir / "home"
        home.mkdir()
        cookie = home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(20).upper())
        cookie.chmod(0o400)
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = {self.port}\n"
            "loopback_users.guest = false\n"
            f"consumer_timeout = {self.consumer_timeout_ms}\n"
        )
        if self.management_port is not None:
            with (self.dir / "rabbitmq.conf").open("a") as conf:
                conf.write(f"management.tcp.port = {self.management_port}\nmanagement.tcp.ip = 127.0.0.1\n")
            (self.dir / "enabled_plugins").write_text("[rabbitmq_management].\n")
        (self.dir / "rabbitmq-env.conf").write_text("# this node's own settings are all in its environment\n")
        self.dir.chmod(0o755)
        shutil.chown(self.dir, "rabbitmq", "rabbitmq")
        for path in self.dir.rglob("*"):
            shutil.chown(path, "rabbitmq", "rabbitmq")
        nofile = min(NOFILE_WANTED, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        with (self.dir / "console.log").open("ab") as console:
            self.process = start_process(
                [
                    *("setpriv", "--reuid=rabbitmq", "--regid=rabbitmq", "--init-groups", "--"),
                    *("sh", "-c", f'ulimit -n {nofile} && exec "$0"', str(SBIN / "rabbitmq-server")),
                ],
                env=self._env(),
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while not self._serving():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.dir / "console.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"RabbitMQ node {self.name} did not start:\n{tail}")
            time.sleep(0.2)
        self.ctl("await_startup")
        self.ctl("eval", "application:set_env(rabbit, channel_tick_interval, 1000).")

    def _serving(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        except OSError:
            return False
        return True

    def ctl(self, *args: str) -> str:
        """Run ``rabbitmqctl`` against the node; returns its stdout."""
        done = subprocess.run(
            [
                *("setpriv", "--reuid=rabbitmq", "--regid=rabbitmq", "--init-groups", "--"),
                *(str(SBIN / "rabbitmqctl"), "-q", "-n", self.name, *args),
            ],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()[-1500:]}")
        return done.stdout

    def unacknowledged(self) -> dict[str, int]:
        """Messages delivered and not acknowledged yet, by queue (only queues that have some)."""
        counts: dict[str, int] = {}
        for line in self.ctl("list_queues", "name", "messages_unacknowledged", "--no-table-headers").splitlines():
            name, _, count = line.rpartition("\t")
            if name and count.strip().isdigit() and int(count) > 0:
                counts[name] = int(count)
        return counts

    def log(self) -> str:
        """Everything the node logged so far."""
        return "\n".join(p.read_text(errors="replace") for p in sorted((self.dir / "log").glob("*.log")))

    def close(self) -> None:
        """Kill the node with its process group and remove its directory: nothing of it is kept, so
        nothing waits for a clean stop (``rabbitmqctl stop`` takes seconds)."""
        if self.process is not None:
            stop_process(self.process, timeout_s=0)
        shutil.rmtree(self.dir, ignore_errors=True)
