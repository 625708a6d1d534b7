"""The directory one `dramatiq` command's processes share their metric samples through, named in the core.

Both sides use it: the ``Metrics`` middleware in every worker process writes there, and the metrics
process (``pipelines.observability.exposition``), which imports no middleware, serves what it finds there. The
directory belongs to one process group, the `dramatiq` master and its children, so an app embedded in
a test run, another namespace or an earlier worker never adds to what this one serves; the group's
first process removes the directories of groups whose master is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pipelines.config.sections import MetricsConfig

#: The environment variable prometheus-client reads to pick multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: File in the multiprocess directory listing the queues the metrics process samples.
QUEUES_FILE = "queues.json"
#: The label every served series carries, so one Prometheus (or `pipelines top`) tells apps apart.
NAMESPACE_LABEL = "pipelines_namespace"
#: File that marks a directory as a process group's, the only kind ever removed.
GROUP_MARKER = ".pipelines-metrics-group"


def metrics_root(config: MetricsConfig) -> Path:
    """Where the groups' directories live: ``[metrics] multiprocess_dir``, else the environment variable."""
    if config.multiprocess_dir is not None:
        return config.multiprocess_dir
    if os.environ.get(MULTIPROC_ENV):
        configured = Path(os.environ[MULTIPROC_ENV])
        # A worker process points the variable at its group's directory: its parent is the root.
        return configured.parent if (configured / GROUP_MARKER).exists() else configured
    return Path(tempfile.gettempdir()) / "pipelines-metrics"


def dramatiq_master() -> int | None:
    """The pid of the `dramatiq` command this process is a child of (None when embedded elsewhere)."""
    parent = multiprocessing.parent_process()
    command = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if parent is None or parent.pid is None or "dramatiq" not in (command.name, command.parent.name):
        return None
    return parent.pid


def group_dir(config: MetricsConfig, namespace: str, master: int) -> Path:
    """The directory of the group of ``master`` (a pid) in ``namespace``."""
    return metrics_root(config) / f"{namespace}-{master}-{_started(master)}"


def open_group(directory: Path) -> bool:
    """Create the group's directory if it is new (True: this process is the group's first) and remove
    the directories of groups whose master has exited."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with _locked(directory.parent):
        if (directory / GROUP_MARKER).exists():
            return False
        for other in directory.parent.iterdir():
            if (other / GROUP_MARKER).exists() and not _alive(other.name):
                shutil.rmtree(other, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)  # a partial directory of an interrupted boot
        directory.mkdir()
        (directory / GROUP_MARKER).write_text(f"{os.getppid()}\n")
        return True


def _started(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot), telling a reused pid apart; "0" where unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def _alive(name: str) -> bool:
    """Whether the master a group directory is named after still runs."""
    try:
        pid, started = name.rsplit("-", 2)[1:]
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError):
        return True  # not ours to judge, or alive under another user
    return _started(int(pid)) == started


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (None when it can), checked before anything listens."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the HTTP server sets it
            probe.bind(address)
    except OSError as e:
        return e.strerror or str(e)
    return None
