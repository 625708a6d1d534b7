"""What the suite leaves behind: nothing. Test namespaces that say which run made them, and processes
that are stopped (with their whole process group) however a test ends.

A test namespace is ``t-<run start, hex seconds>-<pytest pid, hex>-<random>``. When a run starts it
deletes the test namespaces of earlier runs that are not running any more (interrupted ones: their
queues hold RabbitMQ file handles), never its own, never one of a run still going, never a namespace
of any other shape. Every process a test starts is recorded by pid until it is stopped; a run stops
those an earlier, interrupted run left behind, so none is ever reused or left consuming.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pika
import redis

from pipelines.store import RedisRunStore

#: When this run started (epoch seconds): the namespaces it makes say so.
RUN_STARTED_S = int(time.time())
_STAMPED = re.compile(r"t-([0-9a-f]{8})-([0-9a-f]+)-[0-9a-f]{6}")
#: Where the processes tests start are recorded (one file per pid) until they are stopped.
REGISTRY = Path(tempfile.gettempdir()) / f"rabbit-pipelines-test-processes-{os.getuid()}"
#: How long a stopped process may take to exit before its whole group is killed, in seconds.
STOP_TIMEOUT_S = 60


def fresh_namespace() -> str:
    """A test namespace of this run (see the module docstring)."""
    return f"t-{RUN_STARTED_S:08x}-{os.getpid():x}-{uuid.uuid4().hex[:6]}"


def _suite_running(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return b"pytest" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


def is_stale(namespace: str) -> bool:
    """A test namespace of an earlier run that is not running any more."""
    match = _STAMPED.fullmatch(namespace)
    if match is None:
        return False
    started, pid = int(match[1], 16), int(match[2], 16)
    return started < RUN_STARTED_S and not (pid != os.getpid() and _suite_running(pid))


def rabbitmqctl() -> list[str]:
    """The ``rabbitmqctl`` of the test broker (``PIPELINES_TEST_RABBITMQCTL``, e.g. one in a container)."""
    return shlex.split(os.environ.get("PIPELINES_TEST_RABBITMQCTL", "rabbitmqctl"))


def listed(kind: str) -> list[str]:
    """The names ``rabbitmqctl list_queues`` (or ``list_exchanges``) lists."""
    out = subprocess.run([*rabbitmqctl(), "-q", "--formatter", "json", kind, "name"], capture_output=True, check=True)
    return [entry["name"] for entry in json.loads(out.stdout)]


def delete_stale_namespaces(amqp_url: str, redis_url: str) -> list[str]:
    """Delete every queue, exchange and Redis key of stale test namespaces; returns the namespaces."""
    queues, exchanges = listed("list_queues"), listed("list_exchanges")
    keys = [k.decode() for k in redis.Redis.from_url(redis_url).scan_iter(match="t-*", count=1000)]
    stale = sorted({n.split(".", 1)[0] for n in queues + exchanges} | {k.split(":", 1)[0] for k in keys})
    stale = [namespace for namespace in stale if is_stale(namespace)]
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as connection:
        channel = connection.channel()
        for queue in queues:
            if queue.split(".", 1)[0] in stale:
                channel.queue_delete(queue)
        for exchange in exchanges:
            if exchange.split(".", 1)[0] in stale:
                channel.exchange_delete(exchange)
    for namespace in stale:
        RedisRunStore(url=redis_url, namespace=namespace, retention_s=60).delete_namespace()
    return stale


def _die_with_the_suite() -> None:
    """In the child: SIGTERM when the process that started it ends (an interrupted run leaves nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (Linux)


def start_process(command: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """Start ``command`` in a process group of its own, recorded until :func:`stop_process` stops it.

    Call it from a thread that lives as long as the process should: the kernel sends the child its
    SIGTERM when the thread that started it ends, not only the suite.
    """
    process = subprocess.Popen(command, start_new_session=True, preexec_fn=_die_with_the_suite, **popen)  # noqa: PLW1509
    REGISTRY.mkdir(exist_ok=True)
    (REGISTRY / str(process.pid)).write_text(json.dumps({"suite": os.getpid(), "command": command[0]}))
    return process


def stop_process(process: subprocess.Popen[Any], *, timeout_s: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM to the main process (it stops its own workers gracefully); whatever of its group is left
    after ``timeout_s``, or after it exited, is killed. Returns the main process's exit status."""
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout_s)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        (REGISTRY / str(process.pid)).unlink(missing_ok=True)
    return process.returncode


def stop_leftover_processes() -> list[int]:
    """Kill the process groups earlier runs started and never stopped (their run is gone); returns their pids."""
    stopped: list[int] = []
    for record in REGISTRY.glob("*") if REGISTRY.exists() else ():
        pid, owner = int(record.name), json.loads(record.read_text())
        if owner["suite"] == os.getpid() or _suite_running(owner["suite"]):
            continue
        with contextlib.suppress(OSError):
            if os.getsid(pid) == pid and owner["command"].encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.killpg(pid, signal.SIGKILL)
                stopped.append(pid)
        record.unlink(missing_ok=True)
    return stopped
