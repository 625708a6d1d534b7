"""Runs every case for every system, alternating systems round by round, and reports medians and ratios."""

from __future__ import annotations

import argparse
import json
import operator
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psutil

from bench import broker_cost, cases, census, postgres, renewals, starts, tiers
from bench.common import PROCESSES, THREADS, otlp_sink, redis_client
from bench.systems import BareDramatiq, Celery, Ours, RawPika, System, delete_other_systems_queues
from pipelines.handling.holds import RENEWALS_PER_LEASE

RESULTS = Path(__file__).resolve().parent / "results"
#: Our system with every run traced (the others trace at the shipped sampling).
FULLY_TRACED = "pipelines-traced"


@dataclass
class Sizes:
    messages: int = 20_000
    single: int = 3_000
    chains: int = 1_000
    chord: int = 1_000
    fan_out_runs: int = 50
    latency: int = 500
    memory_runs: int = 1_000
    memory_members: int = 5_000
    scale_members: tuple[int, ...] = (25_000, 100_000)
    scale_runs: int = 10_000
    broker: int = 20_000
    starts: int = 4_000
    census: int = 100
    held_steps: int = 1_000
    held_renewals: int = 3


QUICK = Sizes(2_000, 300, 100, 100, 10, 50, 100, 500, (1_000, 2_000), 500, 2_000, 400, 20)


@dataclass
class Results:
    samples: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    def add(self, case: str, system: str, values: dict[str, float]) -> None:
        for metric, value in values.items():
            self.samples.setdefault((case, system, metric), []).append(value)

    def median(self, case: str, system: str, metric: str) -> float | None:
        values = self.samples.get((case, system, metric))
        return statistics.median(values) if values else None


def alternate(
    systems: list[System], rounds: int, run: Callable[[System], dict[str, float]], results: Results, case: str
) -> None:
    """A B A B ...: each round runs every system, starting with a different one."""
    for round_number in range(rounds):
        order = systems[round_number % len(systems) :] + systems[: round_number % len(systems)]
        for system in order:
            results.add(case, system.name, run(system))
            print(f"  {case:<12} round {round_number + 1}/{rounds}  {system.name:<17} done", flush=True)


#: The comparisons a target's goal may use.
COMPARE: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le, "==": operator.eq}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


#: Our system with local steps off: every hop of a chain through RabbitMQ.
ROUTED = "rabbit-pipelines (local steps off)"
#: Our system with each chain started on its own (``app.start``), as a caller's code does.
START_EACH = "rabbit-pipelines (app.start each)"
#: Our system with its runs stored in PostgreSQL instead of Redis.
POSTGRES_STORE = "rabbit-pipelines (PostgreSQL store)"
#: Column headings short enough for the tier table.
COLUMNS = {ROUTED: "local steps off", POSTGRES_STORE: "PostgreSQL store"}


def report(results: Results, rounds: int, sizes: Sizes) -> list[tuple[str, float | None, str, bool | None]]:
    m = results.median

    def speed(case: str, system: str) -> float | None:
        seconds = m(case, system, "seconds")
        return 1 / seconds if seconds else None

    targets: list[tuple[str, float | None, str, bool | None]] = []

    def target(name: str, value: float | None, goal: str, note: str = "") -> None:
        """``goal`` is an operator and a bound ("<= 1.3"), or "" for a figure shown for context."""
        if not goal:
            targets.append((name, value, note or "(context)", None))
            return
        op, bound = goal.split()
        met = COMPARE[op](value, float(bound)) if value is not None else None
        targets.append((name, value, f"{goal} {note}".strip(), met))

    target(
        "no-op throughput / dramatiq",
        ratio(m("throughput", "rabbit-pipelines", "messages_per_s"), m("throughput", "dramatiq", "messages_per_s")),
        ">= 0.9",
        "(shipped sampling)",
    )
    target(
        "no-op throughput, every run traced / dramatiq",
        ratio(m("throughput", FULLY_TRACED, "messages_per_s"), m("throughput", "dramatiq", "messages_per_s")),
        ">= 0.75",
    )
    target(
        "confirmed batch enqueue / dramatiq confirm_delivery",
        ratio(m("enqueue", "rabbit-pipelines", "batch_per_s"), m("enqueue", "dramatiq", "single_per_s")),
        ">= 5",
    )
    target(
        "confirmed batch enqueue / pika batched confirms",
        ratio(m("enqueue", "rabbit-pipelines", "batch_per_s"), m("enqueue", "pika", "batch_per_s")),
        ">= 0.5",
    )
    target(
        "chains speed / dramatiq pipelines",
        ratio(speed("chains", "rabbit-pipelines"), speed("chains", "dramatiq")),
        ">= 1.0",
        "(stretch 1.5)",
    )
    target(
        "chains speed / celery chains",
        ratio(speed("chains", "rabbit-pipelines"), speed("chains", "celery")),
        ">= 3",
    )
    target(
        "chains speed, local steps off / dramatiq pipelines",
        ratio(speed("chains", ROUTED), speed("chains", "dramatiq")),
        "",
    )
    target(
        "chains speed, app.start each / dramatiq pipelines",
        ratio(speed("chains", START_EACH), speed("chains", "dramatiq")),
        "",
    )
    target(
        "chains speed, app.start each / celery chains",
        ratio(speed("chains", START_EACH), speed("chains", "celery")),
        "",
    )
    target("chains: share of hops routed through RabbitMQ", m("chains", "rabbit-pipelines", "routed_hop_share"), "")
    target(
        "chain step CPU, all tiers / dramatiq",
        ratio(
            m("chains", "rabbit-pipelines", "total_cpu_us_per_step"), m("chains", "dramatiq", "total_cpu_us_per_step")
        ),
        "<= 1.0",
    )
    target("app.start, 3-step chain, 8 threads (starts/s)", m("starts", "rabbit-pipelines", "starts_per_s"), ">= 3000")
    target(
        "chord speed / dramatiq group+callback",
        ratio(speed("chord", "rabbit-pipelines"), speed("chord", "dramatiq")),
        ">= 3",
    )
    target(
        "chord speed / celery chord",
        ratio(speed("chord", "rabbit-pipelines"), speed("chord", "celery")),
        ">= 3",
    )
    postgres_store_targets(m, speed, target)
    target(
        "fan-out of 16: publishes per fan-out",
        m("fanout", "rabbit-pipelines", "publishes_per_run_16"),
        "== 1",
    )
    target(
        "fan-out of 16 time / fan-out of 1",
        ratio(m("fanout", "rabbit-pipelines", "seconds_16"), m("fanout", "rabbit-pipelines", "seconds_1")),
        "<= 2",
    )
    target(
        "p50 latency / dramatiq with confirm_delivery",
        ratio(m("latency", "rabbit-pipelines", "p50_ms"), m("latency", "dramatiq", "p50_ms_confirmed")),
        "<= 1.5",
    )
    target(
        "p50 latency / dramatiq",
        ratio(m("latency", "rabbit-pipelines", "p50_ms"), m("latency", "dramatiq", "p50_ms")),
        "",
    )
    target(
        "three-step chain p50, start to done / dramatiq pipeline",
        ratio(m("latency", "rabbit-pipelines", "chain_p50_ms"), m("latency", "dramatiq", "chain_p50_ms")),
        "<= 1.0",
    )
    target("import pipelines, fresh process (s)", m("startup", "rabbit-pipelines", "import_s"), "<= 0.25")
    target("pipelines --help, fresh process (s)", m("startup", "rabbit-pipelines", "cli_help_s"), "<= 0.25")
    target(
        "import pipelines / import dramatiq",
        ratio(m("startup", "rabbit-pipelines", "import_s"), m("startup", "dramatiq", "import_s")),
        "",
    )
    target(
        "worker peak RSS / dramatiq",
        ratio(m("throughput", "rabbit-pipelines", "peak_rss_mb"), m("throughput", "dramatiq", "peak_rss_mb")),
        "<= 1.5",
    )
    return targets


def postgres_store_targets(
    m: Callable[[str, str, str], float | None],
    speed: Callable[[str, str], float | None],
    target: Callable[[str, float | None, str], None],
) -> None:
    """The PostgreSQL store's speed against the Redis store's and the other systems', for context."""
    for case, other, label in (
        ("chains", "rabbit-pipelines", "Redis store"),
        ("chains", "dramatiq", "dramatiq pipelines"),
        ("chains", "celery", "celery chains"),
        ("chord", "rabbit-pipelines", "Redis store"),
        ("chord", "dramatiq", "dramatiq group+callback"),
        ("chord", "celery", "celery chord"),
    ):
        target(f"{case} speed, PostgreSQL store / {label}", ratio(speed(case, POSTGRES_STORE), speed(case, other)), "")
    target(
        "chain step CPU, all tiers, PostgreSQL store / dramatiq",
        ratio(m("chains", POSTGRES_STORE, "total_cpu_us_per_step"), m("chains", "dramatiq", "total_cpu_us_per_step")),
        "",
    )
    target("app.start, PostgreSQL store (starts/s)", m("starts", POSTGRES_STORE, "starts_per_s"), "")
    target(
        "starts/s, PostgreSQL store / Redis store",
        ratio(m("starts", POSTGRES_STORE, "starts_per_s"), m("starts", "rabbit-pipelines", "starts_per_s")),
        "",
    )


def store_and_broker_cases(
    wanted: set[str],
    *,
    rounds: int,
    sizes: Sizes,
    ours: Ours,
    stores: list[System],
    results: Results,
    extra: dict[str, Any],
    log: Callable[[str], Path],
) -> None:
    """The cases of the run store's memory and scale, of starting runs from threads (on each of ``stores``),
    and of RabbitMQ's own cost per message."""
    if "memory" in wanted:
        alternate(
            [ours],
            1,
            lambda s: cases.store_memory(ours, sizes.memory_runs, sizes.memory_members),
            results,
            "memory",
        )
    if "starts" in wanted:
        alternate(stores, rounds, lambda s: starts.starts(cast(Ours, s), sizes.starts), results, "starts")
    if "broker" in wanted:
        for variant, figures in broker_cost.measure(rounds, sizes.broker).items():
            for figure in figures:
                results.add("broker", variant, {"rabbitmq_cpu_us_per_message": figure})
        print("  broker       done", flush=True)
    if "scale" in wanted:
        for members in sizes.scale_members:
            runs = sizes.scale_runs * members // sizes.scale_members[-1]
            extra[f"scale_{members}"] = cases.scale(ours, log("scale"), members, runs)
            print(f"  scale        {members} members, {runs} runs done", flush=True)


#: Every case, in the order they run.
CASES = (
    "startup",
    "throughput",
    "enqueue",
    "chains",
    "chord",
    "fanout",
    "latency",
    "renewals",
    "memory",
    "starts",
    "broker",
    "scale",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case (default 3; medians are reported)")
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes: a smoke run")
    parser.add_argument("--cases", nargs="*", default=None, help="only these cases (by spaces or commas)")
    parser.add_argument(
        "--no-tracing", action="store_true", help="run our workers without tracing (to see what tracing costs)"
    )
    parser.add_argument(
        "--wait-for-replicas",
        type=int,
        default=0,
        help="our store waits for this many replicas (store.wait_for_replicas; BENCH_REDIS_URL must have them)",
    )
    parser.add_argument(
        "--no-postgres-store",
        action="store_true",
        help="leave out our system on the PostgreSQL store (chains, chord, starts; BENCH_POSTGRES_URL)",
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else Sizes()
    named = {case for given in args.cases or [] for case in given.split(",") if case}
    if named - set(CASES):
        parser.error(f"unknown case(s) {', '.join(sorted(named - set(CASES)))}: choose among {', '.join(CASES)}")
    wanted = named or set(CASES)
    started = time.monotonic()
    logs = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    results = Results()
    extra: dict[str, Any] = {}
    print(
        f"machine: {platform.platform()}, {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB;"
        f" workers {PROCESSES} processes x {THREADS} threads; rounds {args.rounds}; logs {logs}"
        + (f"; our store waits for {args.wait_for_replicas} replica(s)" if args.wait_for_replicas else "")
    )
    with otlp_sink() as endpoint:
        ours = Ours(endpoint, tracing=not args.no_tracing, wait_for_replicas=args.wait_for_replicas)
        bare, celery, pika = BareDramatiq(), Celery(), RawPika()
        fully_traced = [] if args.no_tracing else [Ours(endpoint, sample_ratio=1.0, name=FULLY_TRACED)]
        schema = None if args.no_postgres_store else postgres.new_schema()
        on_postgres = (
            [Ours(endpoint, tracing=not args.no_tracing, name=POSTGRES_STORE, postgres_schema=schema)] if schema else []
        )
        try:
            log = lambda name: logs / f"{name}.log"  # noqa: E731
            if "startup" in wanted:
                alternate([ours, bare], args.rounds, cases.startup, results, "startup")
            if "throughput" in wanted:
                alternate(
                    [ours, *fully_traced, bare, celery, pika],
                    args.rounds,
                    lambda s: cases.throughput(s, log(s.name), sizes.messages),
                    results,
                    "throughput",
                )
            if "enqueue" in wanted:
                alternate(
                    [ours, bare, pika],
                    args.rounds,
                    lambda s: cases.enqueue_confirmed(s, sizes.messages, sizes.single),
                    results,
                    "enqueue",
                )
            if "chains" in wanted:
                routed = Ours(endpoint, tracing=not args.no_tracing, local_steps=False, name=ROUTED)
                each = Ours(endpoint, tracing=not args.no_tracing, name=START_EACH, start_each=True)
                alternate(
                    [ours, routed, each, *on_postgres, bare, celery],
                    args.rounds,
                    lambda s: cases.chains(s, log(s.name), sizes.chains),
                    results,
                    "chains",
                )
                alternate([ours], 1, lambda s: census.chain_scripts(ours, log(s.name), sizes.census), results, "census")
                alternate([ours], 1, lambda s: census.chain_hooks(ours, log(s.name), sizes.chains), results, "hooks")
            if "chord" in wanted:
                alternate(
                    [ours, *on_postgres, bare, celery],
                    args.rounds,
                    lambda s: cases.chord_once(s, log(s.name), sizes.chord),
                    results,
                    "chord",
                )
            if "fanout" in wanted:
                alternate(
                    [ours],
                    args.rounds,
                    lambda s: cases.fan_outs(ours, log(s.name), sizes.fan_out_runs),
                    results,
                    "fanout",
                )
            if "latency" in wanted:
                alternate(
                    [ours, bare],
                    args.rounds,
                    lambda s: cases.latency(s, log(s.name), sizes.latency),
                    results,
                    "latency",
                )
            if "renewals" in wanted:
                alternate(
                    [ours],
                    1,
                    lambda s: renewals.renewals(ours, sizes.held_steps, sizes.held_renewals),
                    results,
                    "renewals",
                )
            store_and_broker_cases(
                wanted,
                rounds=args.rounds,
                sizes=sizes,
                ours=ours,
                stores=[ours, *on_postgres],
                results=results,
                extra=extra,
                log=log,
            )
        finally:
            ours.app.broker.delete_topology()  # its quorum queues would otherwise stay on the broker
            for system in [ours, *on_postgres]:
                system.app.close()
            delete_other_systems_queues()
            if schema:
                postgres.drop_schema(schema)
    redis_client().flushdb()
    print_table(results, extra, args.rounds, sizes, time.monotonic() - started)
    return 0


def print_tiers(results: Results) -> None:
    """Where a chain step's CPU goes, tier by tier, for each system (medians, microseconds per step),
    its Redis commands (in all and by command), its publisher-confirm waits, and which store scripts
    our steps run (the census)."""
    systems = [
        s
        for s in ("rabbit-pipelines", ROUTED, POSTGRES_STORE, "dramatiq", "celery")
        if results.median("chains", s, "seconds")
    ]
    if not systems:
        return
    chain_metrics = {metric for case, system, metric in results.samples if case == "chains" and system in systems}
    by_command = sorted(
        m for m in chain_metrics if m.startswith("redis_") and m != "redis_commands_per_step" and "cpu" not in m
    )
    print(f"\n{'chain step, per step':<28}" + "".join(f"{COLUMNS.get(s, s):>18}" for s in systems))
    for metric in (
        *(f"{t}_cpu_us_per_step" for t in tiers.TIERS),
        "total_cpu_us_per_step",
        "redis_commands_per_step",
        *by_command,
        "confirm_waits_per_step",
        "worker_publishes_per_confirm_wait",
    ):
        row = [results.median("chains", s, metric) for s in systems]
        label = metric.replace("_us_per_step", " (us)").replace("_per_step", "").replace("_", " ")
        if metric in by_command:
            label = "  " + metric.removeprefix("redis_").removesuffix("_per_step")
        print(f"{label:<28}" + "".join(f"{'-' if v is None else f'{v:,.2f}':>18}" for v in row))
    scripts = sorted(
        m.removesuffix("_calls") for case, _, m in results.samples if case == "census" and m.endswith("_calls")
    )
    if scripts:
        print("\nstore scripts per chain step (rabbit-pipelines; a short run read through MONITOR)")
        for name in scripts:
            calls = results.median("census", "rabbit-pipelines", f"{name}_calls") or 0.0
            inner = [
                (m.removeprefix(f"{name}_"), results.median("census", "rabbit-pipelines", m) or 0.0)
                for case, _, m in results.samples
                if case == "census" and m.startswith(f"{name}_") and m != f"{name}_calls"
            ]
            inside = ", ".join(f"{command.upper()} {count:.2f}" for command, count in inner)
            print(f"  {name:<12} {calls:5.2f} calls; inside: {inside}")
    print_hooks(results)


#: Hooks shown one by one; the rest are summed on one line.
SHOWN_HOOKS = 12


def print_hooks(results: Results) -> None:
    """The worker's CPU per chain step in each middleware hook, costliest first (a short run of its own,
    each hook timed: ``bench.hook_costs``)."""
    costs = {
        metric: statistics.median(values) for (case, _, metric), values in results.samples.items() if case == "hooks"
    }
    total = costs.pop("hooks_total", None)
    worker = results.median("chains", "rabbit-pipelines", "worker_cpu_us_per_step")
    if total is None:
        return
    ranked = sorted(costs.items(), key=lambda item: -item[1])
    rest = sum(value for _, value in ranked[SHOWN_HOOKS:])
    print("\nworker CPU per chain step by middleware hook, us (rabbit-pipelines; a short run, each hook timed)")
    for label, value in ranked[:SHOWN_HOOKS]:
        print(f"  {label:<48} {value:8.1f}")
    others = f"{len(ranked) - SHOWN_HOOKS} other hooks"
    print(f"  {others:<48} {rest:8.1f}")
    shown_worker = f" of the worker's {worker:.0f} in the measured rounds" if worker else ""
    print(f"  {'all hooks':<48} {total:8.1f}{shown_worker}")


def print_renewals(results: Results) -> None:
    """What renewing held steps' leases costs per step and renewal: round trips, Redis commands (the
    script calls and the commands inside them) and the heartbeat thread's CPU; and per step held one lease."""
    figures = {
        metric.removesuffix("_per_step_renewal"): statistics.median(values)
        for (case, _, metric), values in results.samples.items()
        if case == "renewals"
    }
    if not figures:
        return
    lease_s = figures["lease_s"]
    print(
        f"\nlease renewal, per held step and renewal (rabbit-pipelines; {figures['steps_held']:,.0f} steps held in "
        f"one process, {figures['renewals']:.0f} renewals of a {lease_s:g} s lease, {figures['lost']:.0f} lost)"
    )
    print(f"  {'round trips':<28} {figures['round_trips']:8.4f}  (one a renewal, for all the process holds)")
    print(f"  {'Redis commands':<28} {figures['redis_commands']:8.2f}")
    for script in sorted(m.removesuffix("_calls") for m in figures if m.endswith("_calls")):
        inside = ", ".join(
            f"{m.removeprefix(f'{script}_').upper()} {v:.2f}"
            for m, v in figures.items()
            if m.startswith(f"{script}_") and m != f"{script}_calls"
        )
        print(f"    {script:<26} {figures[f'{script}_calls']:8.2f} calls; inside: {inside}")
    cpu = figures["heartbeat_cpu_us"]
    print(f"  {'heartbeat thread CPU (us)':<28} {cpu:8.2f}")
    print(
        f"  a step held one lease ({lease_s:g} s) is renewed {RENEWALS_PER_LEASE} times: "
        f"{figures['redis_commands'] * RENEWALS_PER_LEASE:.1f} Redis commands, {cpu * RENEWALS_PER_LEASE:.1f} us "
        "of heartbeat CPU, no round trip of its own"
    )


def print_table(results: Results, extra: dict[str, Any], rounds: int, sizes: Sizes, elapsed: float) -> None:
    print(f"\n{'case':<12} {'system':<18} {'metric':<28} {'median':>12}  rounds")
    for (case, system, metric), values in results.samples.items():
        rounds_text = ", ".join(f"{v:.2f}" for v in values)
        print(f"{case:<12} {system:<18} {metric:<28} {statistics.median(values):>12.2f}  {rounds_text}")
    for name, values in extra.items():
        for metric, value in values.items():
            print(f"{'scale':<12} {name:<18} {metric:<28} {value:>12.2f}")
    if len(extra) == 2:
        (small, a), (large, b) = sorted(extra.items(), key=lambda item: int(item[0].split("_")[1]))
        growth = int(large.split("_")[1]) / int(small.split("_")[1])
        for metric in ("chord_seconds", "chord_store_bytes", "runs_seconds", "runs_store_bytes"):
            label = f"{metric} x{growth:g}"
            print(f"{'scale':<12} {'slope':<18} {label:<28} {b[metric] / a[metric]:>12.2f}  (linear: {growth:g})")
    print_tiers(results)
    print_renewals(results)
    print(f"\n{'target':<56} {'value':>8}  {'goal':<22} met")
    targets = report(results, rounds, sizes)
    for name, value, goal, ok in targets:
        shown = "-" if value is None else f"{value:.2f}"
        print(f"{name:<56} {shown:>8}  {goal:<22} {'yes' if ok else 'no' if ok is False else '-'}")
    print(f"\nelapsed {elapsed:.0f} s")
    RESULTS.mkdir(exist_ok=True)
    lines = []
    for (case, system, metric), values in results.samples.items():
        lines.append(
            json.dumps(
                {
                    "case": case,
                    "system": system,
                    "metric": metric,
                    "median": statistics.median(values),
                    "rounds": values,
                }
            )
        )
    for name, value, goal, ok in targets:
        lines.append(json.dumps({"target": name, "value": value, "goal": goal, "met": ok}))
    for name, values in extra.items():
        lines.append(json.dumps({"case": name, **values}))
    for line in lines:
        print(line)
    (RESULTS / "latest.jsonl").write_text("\n".join(lines) + "\n")
