"""What every benchmark case shares: services, counters, worker processes, memory readings."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import redis

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
#: Worker shape of every system: processes x threads.
PROCESSES = 2
THREADS = 8
#: Namespace of rabbit-pipelines' queues and keys during the benchmark.
NAMESPACE = "bench"
#: Longest any single measurement may take.
CASE_TIMEOUT_S = 300


_polls = [0]
"""GETs :func:`wait_for_count` sent: the benchmark's own Redis commands, not the system's."""


def redis_client() -> Any:
    return redis.Redis.from_url(REDIS_URL)


def polls() -> int:
    """How many times this process read a counter it waits on (see :func:`wait_for_count`)."""
    return _polls[0]


def wait_for_count(key: str, expected: int, *, timeout_s: float = CASE_TIMEOUT_S) -> float:
    """Wait until counter ``key`` reaches ``expected``; returns the time (perf_counter) it did."""
    client = redis_client()
    deadline = time.monotonic() + timeout_s
    while True:
        _polls[0] += 1
        count = int(client.get(key) or 0)
        if count >= expected:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key} reached {count} of {expected} in {timeout_s} s")
        time.sleep(0.005)


class _Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that accepts and drops every export (a stand-in for Jaeger)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@contextmanager
def otlp_sink() -> Iterator[str]:
    """A local OTLP/HTTP receiver; yields its endpoint."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


class Worker:
    """Worker commands, each in its own process group (so that a pause or a kill reaches all its processes)."""

    def __init__(self, commands: list[list[str]], env: Mapping[str, str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.processes = [
                subprocess.Popen(command, env=dict(env), cwd=ROOT, stdout=out, stderr=out, start_new_session=True)
                for command in commands
            ]

    def signal_all(self, signum: int) -> None:
        for process in self.processes:
            os.killpg(process.pid, signum)

    def peak_rss_mb(self) -> float:
        """Sum of the peak resident memory of every process of the worker (VmHWM), in MiB."""
        total = 0
        for main in self.processes:
            try:
                family = [psutil.Process(main.pid), *psutil.Process(main.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for process in family:
                try:
                    status = Path(f"/proc/{process.pid}/status").read_text()
                except OSError:
                    continue
                total += sum(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        return total / 1024

    def stop(self) -> None:
        # The main process of each CLI shuts its own children down.
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "OTEL_", "PROMETHEUS_"))}
    return env | {"BENCH_AMQP_URL": AMQP_URL, "BENCH_REDIS_URL": REDIS_URL, "PYTHONPATH": str(ROOT)}


def confirm_stream(connection: Any, channel: Any) -> dict[str, int]:
    """Turn on publisher confirms on pika's lower-level ``channel``; the returned dict's ``up_to`` holds
    the highest delivery tag confirmed so far (RabbitMQ confirms with ``multiple``)."""
    confirmed = {"up_to": 0}
    ready: list[object] = []
    channel.confirm_delivery(
        ack_nack_callback=lambda frame: confirmed.__setitem__("up_to", frame.method.delivery_tag),
        callback=ready.append,
    )
    while not ready:
        connection.process_data_events(time_limit=0.1)
    return confirmed
