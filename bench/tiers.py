"""CPU of each tier a step goes through (worker, RabbitMQ, Redis, producer) and Redis commands, read
around a measurement so a case can report them per step.

CPU comes from the kernel's accounting (``/proc/<pid>/stat`` through psutil: user + system time) of
the worker's whole process tree, of the RabbitMQ node (``beam.smp``) and the ``redis-server`` that
listen on the benchmark's ports, and of this process (the producer). Redis commands are the
total of ``INFO commandstats`` calls, scripts' inner commands included.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from bench.common import AMQP_URL, REDIS_URL, Worker, redis_client

#: The tiers, as reported.
TIERS = ("worker", "rabbitmq", "redis", "producer")


def _cpu_s(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _listening_on(url: str, name: str) -> list[psutil.Process]:
    """The ``name`` process listening on ``url``'s port (all of them if that cannot be told)."""
    port = urlsplit(url).port
    named = [p for p in psutil.process_iter(["name"]) if p.info["name"] == name]
    for process in named:
        try:
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in process.net_connections("tcp")):
                return [process]
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
    return named


def _worker_tree(worker: Worker) -> list[psutil.Process]:
    family: list[psutil.Process] = []
    for main in worker.processes:
        try:
            parent = psutil.Process(main.pid)
            family += [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return family


def redis_commands() -> int:
    """Commands Redis has run since its statistics were last reset."""
    stats = redis_client().info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


@dataclass
class Reading:
    cpu_s: dict[str, float]
    commands: int


def read(worker: Worker) -> Reading:
    """CPU seconds of each tier so far, and Redis commands so far. The worker's processes must stay the
    same between two readings (a process that exits takes its CPU time with it)."""
    cpu = {
        "worker": _cpu_s(_worker_tree(worker)),
        "rabbitmq": _cpu_s(_listening_on(AMQP_URL, "beam.smp")),
        "redis": _cpu_s(_listening_on(REDIS_URL, "redis-server")),
        "producer": _cpu_s([psutil.Process()]),
    }
    return Reading(cpu, redis_commands())


def per_step(before: Reading, after: Reading, steps: int) -> dict[str, float]:
    """Microseconds of CPU per step for each tier, their total, and Redis commands per step."""
    figures = {f"{tier}_cpu_us_per_step": 1e6 * (after.cpu_s[tier] - before.cpu_s[tier]) / steps for tier in TIERS}
    figures["total_cpu_us_per_step"] = sum(figures.values())
    figures["redis_commands_per_step"] = (after.commands - before.commands) / steps
    return figures
