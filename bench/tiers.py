"""CPU of each tier a step goes through (worker, RabbitMQ, Redis, PostgreSQL, producer), Redis commands
and publisher confirm waits, read around a measurement so a case can report them per step.

CPU comes from the kernel's accounting (``/proc/<pid>/stat`` through psutil: user + system time) of
the worker's whole process tree, of the RabbitMQ node (``beam.smp``) and the ``redis-server`` that
listen on the benchmark's ports, of the PostgreSQL backends serving the worker's and this process's
connections (none unless the run store is PostgreSQL), and of this process (the producer). Redis commands are the
differences of ``INFO commandstats`` (scripts' inner commands included), by command, less the
benchmark's own (its readings and its polling of the counters it waits on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from bench import common, postgres
from bench.common import AMQP_URL, REDIS_URL, Worker, redis_client

#: The tiers, as reported.
TIERS = ("worker", "rabbitmq", "redis", "postgres", "producer")
#: Commands only the benchmark itself sends: its readings, and the set-up of its connections.
OWN_COMMANDS = frozenset({"info", "client|setinfo", "select"})


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


def redis_commands() -> dict[str, int]:
    """Calls of each command Redis has run since its statistics were last reset (``get``, ``evalsha``,
    ``client|setinfo``...), the benchmark's own polls taken out."""
    stats = redis_client().info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(entry["calls"]) for name, entry in stats.items()}
    calls["get"] = calls.get("get", 0) - common.polls()
    return {name: count for name, count in calls.items() if name not in OWN_COMMANDS}


@dataclass
class Reading:
    cpu_s: dict[str, float]
    commands: dict[str, int]


def read(worker: Worker) -> Reading:
    """CPU seconds of each tier so far, and Redis commands so far. The worker's processes must stay the
    same between two readings (a process that exits takes its CPU time with it), and so must the
    PostgreSQL backends that serve them (a pooled connection stays open)."""
    tree = _worker_tree(worker)
    cpu = {
        "worker": _cpu_s(tree),
        "rabbitmq": _cpu_s(_listening_on(AMQP_URL, "beam.smp")),
        "redis": _cpu_s(_listening_on(REDIS_URL, "redis-server")),
        "postgres": _cpu_s(postgres.backends_of([*tree, psutil.Process()])),
        "producer": _cpu_s([psutil.Process()]),
    }
    return Reading(cpu, redis_commands())


def per_step(before: Reading, after: Reading, steps: int) -> dict[str, float]:
    """Microseconds of CPU per step for each tier and their total; Redis commands per step, in all
    (``redis_commands_per_step``) and by command (``redis_<command>_per_step``)."""
    figures = {f"{tier}_cpu_us_per_step": 1e6 * (after.cpu_s[tier] - before.cpu_s[tier]) / steps for tier in TIERS}
    figures["total_cpu_us_per_step"] = sum(figures.values())
    commands = _differences(before.commands, after.commands)
    figures["redis_commands_per_step"] = sum(commands.values()) / steps
    figures |= {f"redis_{name}_per_step": count / steps for name, count in sorted(commands.items())}
    return figures


def _differences(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    return {name: count - before.get(name, 0) for name, count in after.items() if count != before.get(name, 0)}
