"""What the suite leaves behind: nothing. Test namespaces that say which run made them, and processes
that are stopped (with their whole process group) however a test ends.

A test namespace is ``t-<run start, hex seconds>-<pytest pid, hex>-<random>``. When a run starts it
deletes the test namespaces of earlier runs that are not running any more (interrupted ones: their
queues hold RabbitMQ file handles), never its own, never one of a run still going, never a namespace
of any other shape; a virtual host a run makes (to trace publishes in) is named as a test namespace
and goes the same way. Every process a test starts is recorded by pid until it is stopped; a run stops
those an earlier, interrupted run left behind, so none is ever reused or left consuming.
"""

from __future__ import annotations

import base64
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
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import pika
import psycopg
import redis

from pipelines.store import RedisRunStore
from pipelines.store.postgres import PostgresRunStore

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


def management_api(amqp_url: str) -> str:
    """The test broker's management API (``PIPELINES_TEST_RABBITMQ_API``; port 15672 of its host, as
    the docker compose broker publishes it)."""
    return os.environ.get("PIPELINES_TEST_RABBITMQ_API") or f"http://{urlsplit(amqp_url).hostname or 'localhost'}:15672"


class ListingUnavailable(RuntimeError):
    """Neither ``rabbitmqctl`` nor the management API lists the broker's queues."""


def listed(kind: str, *, amqp_url: str) -> list[str]:
    """The names of the broker's queues (``kind`` ``"list_queues"``), exchanges (``"list_exchanges"``) or
    virtual hosts (``"list_vhosts"``), from its ``rabbitmqctl`` or, when that cannot be run, from its
    management API.

    Raises:
        ListingUnavailable: Neither answered (the message says how to point the suite at one).
    """
    try:
        out = subprocess.run(
            [*rabbitmqctl(), "-q", "--formatter", "json", kind, "name"], capture_output=True, check=True, timeout=120
        )
        return [entry["name"] for entry in json.loads(out.stdout)]
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        by_ctl = f"{shlex.join(rabbitmqctl())}: {type(e).__name__}"
    api = management_api(amqp_url)
    try:
        return _listed_by_api(api, kind, amqp_url)
    except (OSError, ValueError, KeyError) as e:
        raise ListingUnavailable(
            f"cannot list the broker's {kind.removeprefix('list_')}, neither with {by_ctl} nor with its management "
            f"API at {api} ({type(e).__name__}: {e}). Set PIPELINES_TEST_RABBITMQCTL to its rabbitmqctl command "
            "(e.g. `docker compose exec -T rabbitmq rabbitmqctl`) or PIPELINES_TEST_RABBITMQ_API to its management API."
        ) from None


def listed_together(*kinds: str, amqp_url: str) -> list[list[str]]:
    """:func:`listed` for each of ``kinds``, asked at the same time (each ``rabbitmqctl`` spends most of
    its time starting its own Erlang VM)."""
    with ThreadPoolExecutor(len(kinds), thread_name_prefix="listing") as pool:
        return list(pool.map(lambda kind: listed(kind, amqp_url=amqp_url), kinds))


def _listed_by_api(api: str, kind: str, amqp_url: str) -> list[str]:
    """``GET /api/queues/<vhost>`` (or ``exchanges``; ``vhosts``: all of them) with the AMQP URL's user,
    password and virtual host."""
    parts = urlsplit(amqp_url)
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    path = "vhosts" if kind == "list_vhosts" else f"{kind.removeprefix('list_')}/{quote(vhost, safe='')}"
    with urllib.request.urlopen(_api_request(amqp_url, f"{api}/api/{path}?columns=name"), timeout=30) as response:
        return [str(entry["name"]) for entry in json.loads(response.read())]


def _api_request(amqp_url: str, url: str, method: str = "GET") -> urllib.request.Request:
    """A request to the management API with the AMQP URL's user and password."""
    parts = urlsplit(amqp_url)
    login = f"{unquote(parts.username or 'guest')}:{unquote(parts.password or 'guest')}"
    headers = {"Authorization": f"Basic {base64.b64encode(login.encode()).decode()}"}
    return urllib.request.Request(url, headers=headers, method=method)


def make_traced_vhost(amqp_url: str) -> str:
    """A virtual host of this run (named as a test namespace, so that a run that ends before it deletes it
    leaves it stale), open to the AMQP URL's user, with RabbitMQ's firehose tracer on; returns the AMQP
    URL into it. Made with ``rabbitmqctl``."""
    vhost = fresh_namespace()
    user = unquote(urlsplit(amqp_url).username or "guest")
    subprocess.run([*rabbitmqctl(), "-q", "add_vhost", vhost], check=True, capture_output=True, timeout=120)
    try:
        for args in (("set_permissions", "-p", vhost, user, ".*", ".*", ".*"), ("trace_on", "-p", vhost)):
            subprocess.run([*rabbitmqctl(), "-q", *args], check=True, capture_output=True, timeout=120)
    except BaseException:
        delete_vhost(amqp_url, vhost)
        raise
    return urlunsplit(urlsplit(amqp_url)._replace(path="/" + quote(vhost, safe="")))


def delete_vhost(amqp_url: str, vhost: str) -> None:
    """Delete a virtual host and everything in it, with ``rabbitmqctl`` or, when it cannot be run, the
    management API."""
    try:
        subprocess.run([*rabbitmqctl(), "-q", "delete_vhost", vhost], check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):  # no rabbitmqctl here: the management API, as for listing
        url = f"{management_api(amqp_url)}/api/vhosts/{quote(vhost, safe='')}"
        with urllib.request.urlopen(_api_request(amqp_url, url, "DELETE"), timeout=30):
            pass


def _delete(amqp_url: str, redis_url: str, namespaces: list[str], queues: list[str], exchanges: list[str]) -> None:
    """Delete the listed queues and exchanges of these namespaces, and their Redis keys."""
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as connection:
        channel = connection.channel()
        for queue in queues:
            if queue.split(".", 1)[0] in namespaces:
                channel.queue_delete(queue)
        for exchange in exchanges:
            if exchange.split(".", 1)[0] in namespaces:
                channel.exchange_delete(exchange)
    for namespace in namespaces:
        RedisRunStore(url=redis_url, namespace=namespace, retention_s=60).delete_namespace()


def delete_store(store: object) -> None:
    """Delete what a test's run store holds: a Redis store's namespace keys, a PostgreSQL store's schema."""
    if isinstance(store, RedisRunStore):
        store.delete_namespace()
    elif isinstance(store, PostgresRunStore):
        store.drop_schema()


def delete_stale_schemas(postgres_url: str) -> list[str]:
    """Drop the PostgreSQL schemas of stale test namespaces (``t_...``, see ``backends.schema_of``)."""
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
        names = [row[0] for row in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 't\\_%'")]
        stale = [name for name in names if is_stale(name.replace("_", "-"))]
        for name in stale:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    return stale


def delete_test_namespace(amqp_url: str, redis_url: str, namespace: str) -> None:
    """Delete every queue and exchange named ``<namespace>.*`` (whatever declared them) and its Redis keys.

    Raises:
        ListingUnavailable: The broker's queues cannot be listed (its Redis keys are deleted all the same).
    """
    try:
        queues, exchanges = listed_together("list_queues", "list_exchanges", amqp_url=amqp_url)
    except ListingUnavailable:
        RedisRunStore(url=redis_url, namespace=namespace, retention_s=60).delete_namespace()
        raise
    _delete(amqp_url, redis_url, [namespace], queues, exchanges)


def delete_stale_namespaces(amqp_url: str, redis_url: str) -> list[str]:
    """Delete every queue, exchange, Redis key and virtual host of stale test namespaces; returns the
    namespaces."""
    queues, exchanges = listed_together("list_queues", "list_exchanges", amqp_url=amqp_url)
    keys = [k.decode() for k in redis.Redis.from_url(redis_url).scan_iter(match="t-*", count=1000)]
    stale = sorted({n.split(".", 1)[0] for n in queues + exchanges} | {k.split(":", 1)[0] for k in keys})
    stale = [namespace for namespace in stale if is_stale(namespace)]
    _delete(amqp_url, redis_url, stale, queues, exchanges)
    vhosts = [vhost for vhost in listed("list_vhosts", amqp_url=amqp_url) if is_stale(vhost)]
    for vhost in vhosts:
        delete_vhost(amqp_url, vhost)
    return sorted({*stale, *vhosts})


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
