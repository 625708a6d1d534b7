"""Redis servers a test starts itself, each on a loopback port of its own and keeping nothing on disk:
a server (a primary, a replica, a cluster node, one that asks for a password) or a sentinel. The test
stops each it started (:meth:`Server.stop`)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis

from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port

#: Longest a server started here may take to answer, or to reach a state a test waits for.
START_S = 20.0


class Server:
    """A ``redis-server`` on a port of its own in ``directory`` (made here), with extra ``options``;
    ``password`` becomes its ``requirepass`` and its client's password."""

    def __init__(self, directory: Path, *options: str, password: str | None = None) -> None:
        self.port = free_port()
        directory.mkdir()
        self.process = start_process(self._command(directory, options, password), stdout=subprocess.DEVNULL)
        self.client = redis.Redis(port=self.port, password=password)
        self.await_condition(self._answers, "to answer")

    def _command(self, directory: Path, options: tuple[str, ...], password: str | None) -> list[str]:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        return [*command, "no", "--dir", str(directory), *options, *(("--requirepass", password) if password else ())]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _answers(self) -> bool:
        assert self.process.poll() is None, f"redis-server on {self.port} exited with {self.process.returncode}"
        try:
            return bool(self.client.ping())
        except redis.ConnectionError:
            return False

    def await_condition(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_S
        while not condition():
            assert time.monotonic() < deadline, f"redis-server on {self.port} did not come {what} in {START_S} s"
            time.sleep(0.05)

    def waits(self) -> int:
        """How many WAITs this server has served."""
        return int(self.client.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))

    def stop(self) -> None:
        self.client.close()
        stop_process(self.process, timeout_s=5)


class Sentinel(Server):
    """A sentinel that monitors one primary, ``name`` at ``primary_port``, alone (quorum 1). It takes
    ``down_after_ms`` of silence to call the primary down: until then it names it as the primary."""

    def __init__(self, directory: Path, *, name: str, primary_port: int, down_after_ms: int = 60_000) -> None:
        self.monitors = (name, primary_port, down_after_ms)
        super().__init__(directory)

    def _command(self, directory: Path, options: tuple[str, ...], password: str | None) -> list[str]:
        name, primary_port, down_after_ms = self.monitors
        config = directory / "sentinel.conf"  # a sentinel rewrites its configuration file: one of its own
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {directory}\n"
            f"sentinel monitor {name} 127.0.0.1 {primary_port} 1\n"
            f"sentinel down-after-milliseconds {name} {down_after_ms}\n"
        )
        return ["redis-server", str(config), "--sentinel"]

    def url_of(self, name: str) -> str:
        """The run store's URL of the primary ``name`` behind this sentinel, database 0."""
        return f"redis+sentinel://127.0.0.1:{self.port}/{name}/0"
