"""The benchmark cases. Each returns its measurements for one system in one round."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pika
from celery import chain as celery_chain
from celery import chord as celery_chord
from dramatiq import group as dramatiq_group
from dramatiq import pipeline as dramatiq_pipeline
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from bench import tiers
from bench.common import AMQP_URL, Worker, confirm_stream, redis_client, wait_for_count
from bench.systems import BareDramatiq, Celery, Ours, RawPika, System
from pipelines import chain, chord, fan_out, group, step

#: Fresh interpreters per start-up measurement (the median is kept).
STARTS = 5


def startup(system: System) -> dict[str, float]:
    """Seconds a fresh process takes to import the package (and, for us, to answer ``pipelines --help``)."""
    if isinstance(system, Ours):
        return {
            "import_s": _median_start([sys.executable, "-c", "import pipelines"]),
            "cli_help_s": _median_start([str(Path(sys.executable).parent / "pipelines"), "--help"]),
        }
    return {"import_s": _median_start([sys.executable, "-c", "import dramatiq"])}


def _median_start(command: list[str]) -> float:
    times = []
    for _ in range(STARTS):
        began = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def key() -> str:
    return f"bench:{uuid.uuid4().hex}"


class Running:
    """A system's worker, started for a case and stopped after it, with its peak memory."""

    def __init__(self, system: System, log: Path) -> None:
        self.system = system
        self.log = log
        self.worker: Worker | None = None

    def __enter__(self) -> Running:
        self.worker = self.system.worker(self.log)
        # Warm up: one message through the whole path, so start-up is not measured.
        warm = key()
        self.system.noops(warm, 1)
        wait_for_count(warm, 1, timeout_s=120)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.worker is not None
        self.worker.stop()


def throughput(system: System, log: Path, n: int) -> dict[str, float]:
    """Drain rate of ``n`` queued no-op messages, and the workers' peak memory."""
    system.purge()
    with Running(system, log) as running:
        counter = key()
        stop_consuming(running)
        system.noops(counter, n)
        resume_consuming(running)
        first = wait_for_count(counter, 1)
        done = wait_for_count(counter, n)
        rss = running.worker.peak_rss_mb() if running.worker else 0.0
    return {"messages_per_s": (n - 1) / (done - first), "peak_rss_mb": rss}


def stop_consuming(running: Running) -> None:
    """Queue the messages while the worker is paused, so only draining is timed (SIGSTOP/SIGCONT)."""
    assert running.worker is not None
    running.worker.signal_all(signal.SIGSTOP)


def resume_consuming(running: Running) -> None:
    assert running.worker is not None
    running.worker.signal_all(signal.SIGCONT)


def enqueue_confirmed(system: System, n_batch: int, n_single: int) -> dict[str, float]:
    """Publishing with publisher confirms: as one batch, and one message at a time."""
    counter = key()
    results: dict[str, float] = {}
    if isinstance(system, Ours):
        messages = [system.actors.noop.message(counter) for _ in range(n_batch)]
        started = time.perf_counter()
        system.app.broker.enqueue_many(messages)
        results["batch_per_s"] = n_batch / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(n_single):
            system.app.broker.enqueue(system.actors.noop.message(counter))
        results["single_per_s"] = n_single / (time.perf_counter() - started)
    elif isinstance(system, BareDramatiq):
        broker = RabbitmqBroker(url=AMQP_URL, confirm_delivery=True)
        message = system.module.noop.message(counter)
        broker.declare_queue(message.queue_name)
        started = time.perf_counter()
        for _ in range(n_single):
            broker.enqueue(system.module.noop.message(counter))
        results["single_per_s"] = n_single / (time.perf_counter() - started)
        broker.close()
    elif isinstance(system, RawPika):
        results["batch_per_s"] = pika_batched_confirms(system, counter, n_batch)
    system.purge()
    return results


def pika_batched_confirms(system: RawPika, counter: str, n: int) -> float:
    """Publish ``n`` messages, then wait once for all the confirms (pika's lower-level channel)."""
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
        channel = connection.channel()
        channel.queue_declare(system.queue, durable=True)
        impl = channel._impl
        confirmed = confirm_stream(connection, impl)
        properties = pika.BasicProperties(delivery_mode=2)
        started = time.perf_counter()
        for _ in range(n):
            impl.basic_publish("", system.queue, counter.encode(), properties)
        while confirmed["up_to"] < n:
            connection.process_data_events(time_limit=0.05)
        return n / (time.perf_counter() - started)


def chains(system: System, log: Path, n: int) -> dict[str, float]:
    """``n`` three-step chains, submitted to last step done: each tier's CPU, Redis commands and
    publisher-confirm waits per step."""
    counter = key()
    steps = 3 * n
    producer_waits = system.app.broker.confirm_waits if isinstance(system, Ours) else 0
    with Running(system, log) as running:
        assert running.worker is not None
        before = tiers.read(running.worker)
        started = time.perf_counter()
        if isinstance(system, Ours) and system.start_each:
            m = system.actors
            for _ in range(n):  # as a caller's code does: a chain built for each start, which waits for it
                system.app.start(chain(step(m.hop, counter), step(m.hop, counter), step(m.last, counter)))
        elif isinstance(system, Ours):
            m = system.actors
            pipeline = chain(step(m.hop, counter), step(m.hop, counter), step(m.last, counter))
            system.app.start_many([pipeline] * n)
        elif isinstance(system, BareDramatiq):
            m = system.module
            for _ in range(n):
                messages = [m.hop.message(counter), m.hop.message(counter), m.last.message(counter)]
                dramatiq_pipeline(messages, broker=m.broker).run()
        elif isinstance(system, Celery):
            m = system.module
            for _ in range(n):
                celery_chain(m.hop.s(0, counter), m.hop.s(counter), m.last.s(counter)).apply_async()
        done = wait_for_count(counter, n)
        after = tiers.read(running.worker)
    figures = {"seconds": done - started, **tiers.per_step(before, after, steps)}
    # Bare Dramatiq (without BENCH_CONFIRM) and Celery publish without publisher confirms: no waits.
    figures["confirm_waits_per_step"] = 0.0
    if isinstance(system, Ours):
        # The worker's counts cover its whole life; its warm-up message publishes nothing.
        worker = system.worker_counts()
        figures["confirm_waits_per_step"] = (
            worker["confirm_waits"] + system.app.broker.confirm_waits - producer_waits
        ) / steps
        figures["worker_publishes_per_confirm_wait"] = worker["publishes"] / max(worker["confirm_waits"], 1)
        # A chain's two later steps are hops: each one the worker either published or ran where it was.
        figures["routed_hop_share"] = worker["publishes"] / (2 * n)
    return figures


def chord_once(system: System, log: Path, members: int) -> dict[str, float]:
    """One chord of ``members`` members and its callback, submitted to callback done."""
    counter = key()
    with Running(system, log):
        started = time.perf_counter()
        if isinstance(system, Ours):
            m = system.actors
            system.app.start(
                chord(group(step(m.member, counter) for _ in range(members)), then=step(m.gather, counter))
            )
        elif isinstance(system, BareDramatiq):
            m = system.module
            callback = m.gather.message(counter)
            members_ = [m.member.message(counter) for _ in range(members)]
            members_group = dramatiq_group(members_, broker=m.broker)
            members_group.add_completion_callback(callback)
            members_group.run()
        elif isinstance(system, Celery):
            m = system.module
            celery_chord(m.member.s(counter) for _ in range(members))(m.gather.s(counter))
        done = wait_for_count(counter, 1)
    return {"seconds": done - started}


def fan_outs(system: Ours, log: Path, runs: int) -> dict[str, float]:
    """Fan-outs of 1, 4 and 16 branches: publishes per fan-out, and the median end-to-end time of one
    fan-out (started, then every branch done), over ``runs`` sequential runs of each width."""
    results: dict[str, float] = {}
    with Running(system, log):
        for width in (1, 4, 16):
            branches = system.actors.branches[:width]
            before = system.app.broker.publish_count
            times = []
            for _ in range(runs):
                counter = key()
                node = (
                    fan_out(*(step(b, counter) for b in branches)) if width > 1 else chain(step(branches[0], counter))
                )
                started = time.perf_counter()
                system.app.start(node)
                times.append(wait_for_count(counter, width) - started)
            results[f"publishes_per_run_{width}"] = (system.app.broker.publish_count - before) / runs
            results[f"seconds_{width}"] = statistics.median(times)
    return results


def latency(system: System, log: Path, n: int) -> dict[str, float]:
    """Enqueue-to-processed latency of ``n`` sequential messages, then start-to-done latency of ``n``
    sequential three-step chains, in milliseconds.

    Bare Dramatiq's messages are measured twice: with its default (no publisher confirms) and with
    ``confirm_delivery=True``, which is what rabbit-pipelines always does. Its chains are its
    ``pipeline`` with its defaults; ours are each started with ``app.start`` (a chain built for each
    start, as a caller's code does), which returns once the run is stored and its first step's publish
    confirmed.
    """
    client = redis_client()
    results: dict[str, float] = {}
    confirming = RabbitmqBroker(url=AMQP_URL, confirm_delivery=True) if isinstance(system, BareDramatiq) else None
    with Running(system, log):
        for variant in ("", "_confirmed") if confirming else ("",):
            samples: list[float] = []
            for _ in range(n):
                counter = key()
                started = time.perf_counter()
                if isinstance(system, Ours):
                    system.app.broker.enqueue(system.actors.ping.message(counter))
                elif isinstance(system, BareDramatiq):
                    if variant and confirming is not None:
                        confirming.enqueue(system.module.ping.message(counter))
                    else:
                        system.module.ping.send(counter)
                client.blpop([counter], timeout=30)
                samples.append((time.perf_counter() - started) * 1000)
                client.delete(counter)
            quantiles = statistics.quantiles(samples, n=100)
            results |= {
                f"p50_ms{variant}": quantiles[49],
                f"p95_ms{variant}": quantiles[94],
                f"p99_ms{variant}": quantiles[98],
            }
        if isinstance(system, Ours | BareDramatiq):
            quantiles = statistics.quantiles([_chain_latency_ms(system, client) for _ in range(n)], n=100)
            results |= {"chain_p50_ms": quantiles[49], "chain_p95_ms": quantiles[94]}
    if confirming is not None:
        confirming.close()
    return results


def _chain_latency_ms(system: Ours | BareDramatiq, client: Any) -> float:
    """Milliseconds from starting a three-step chain to its last step done (it pushes to a list)."""
    counter = key()
    started = time.perf_counter()
    if isinstance(system, Ours):
        m = system.actors
        system.app.start(chain(step(m.hop, counter), step(m.hop, counter), step(m.ping_last, counter)))
    else:
        b = system.module
        dramatiq_pipeline(
            [b.hop.message(counter), b.hop.message(counter), b.ping_last.message(counter)], broker=b.broker
        ).run()
    if client.blpop([counter], timeout=30) is None:
        raise TimeoutError(f"a three-step chain of {system.name} did not finish within 30 s")
    took = (time.perf_counter() - started) * 1000
    client.delete(counter)
    return took


def store_memory(system: Ours, runs: int, members: int) -> dict[str, float]:
    """Redis memory per in-flight run (three-step chains) and per chord member (no worker running)."""
    client = redis_client()
    m = system.actors
    counter = key()
    before = int(client.info("memory")["used_memory"])
    for _ in range(runs):
        system.app.start(chain(step(m.hop, counter), step(m.hop, counter), step(m.last, counter)))
    per_run = (int(client.info("memory")["used_memory"]) - before) / runs
    before = int(client.info("memory")["used_memory"])
    system.app.start(chord(group(step(m.member, counter) for _ in range(members)), then=step(m.gather, counter)))
    per_member = (int(client.info("memory")["used_memory"]) - before) / members
    system.purge()
    for stale in client.scan_iter(match="bench:run:*", count=1000):
        client.delete(stale)
    return {"bytes_per_run": per_run, "bytes_per_chord_member": per_member}


def scale(system: Ours, log: Path, members: int, runs: int) -> dict[str, Any]:
    """A chord of ``members`` members, and ``runs`` concurrent two-step runs: time and store memory."""
    client = redis_client()
    m = system.actors
    results: dict[str, Any] = {}
    with Running(system, log):
        counter = key()
        before = int(client.info("memory")["used_memory"])
        started = time.perf_counter()
        system.app.start(chord(group(step(m.member, counter) for _ in range(members)), then=step(m.gather, counter)))
        results["chord_store_bytes"] = int(client.info("memory")["used_memory"]) - before
        results["chord_seconds"] = wait_for_count(counter, 1) - started
        counter = key()
        before = int(client.info("memory")["used_memory"])
        started = time.perf_counter()
        for _ in range(runs):
            system.app.start(chain(step(m.hop, counter), step(m.last, counter)))
        results["runs_store_bytes"] = int(client.info("memory")["used_memory"]) - before
        results["runs_seconds"] = wait_for_count(counter, runs) - started
    return results
