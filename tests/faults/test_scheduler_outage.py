"""A scheduler whose RabbitMQ goes away at a tick keeps running and sends the tick once it is back."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dramatiq
import pendulum
import pytest
from periodiq import cron

from pipelines.app import build_app
from pipelines.cli.scheduler import Scheduler
from pipelines.config.settings import Settings
from pipelines.errors import BrokerUnavailable
from tests.support.backends import AMQP_URL
from tests.support.faults.fault_scenario import ROOT, Fault
from tests.support.faults.tcp_proxy import TcpProxy
from tests.support.housekeeping import start_process, stop_process

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    target = urlsplit(AMQP_URL)
    way = TcpProxy((target.hostname or "127.0.0.1", target.port or 5672))
    way.start()
    yield way
    way.stop()


def test_a_scheduler_whose_broker_disappears_and_returns_keeps_running(fault: Fault, proxy: TcpProxy) -> None:
    fault.workers.start(module="sched_worker")  # the worker reaches RabbitMQ directly
    env = fault.workers.env | {
        "PIPELINES_BROKER__URL": AMQP_URL.replace(f":{urlsplit(AMQP_URL).port}/", f":{proxy.port}/"),
        "PIPELINES_BROKER__CONNECTION_ATTEMPTS": "1",
        "PIPELINES_BROKER__RETRY_DELAY_S": "0",
        "PIPELINES_LOGGING__LEVEL": "INFO",
        "SCHED_CLOCK_AHEAD": "1",  # its clock starts at second 50: the next tick is seconds away
    }
    log_path = fault.log.with_name("scheduler.log")
    command = [
        str(Path(sys.executable).parent / "pipelines"),
        "scheduler",
        "tests.support.faults.sched_clock",
        "--path",
        str(ROOT),
    ]
    with log_path.open("ab") as log:
        scheduler = start_process(command, env=env, cwd=ROOT, stdout=log, stderr=log)
    try:
        fault.wait_until(lambda: fault.ledger.sequence("ticks", "minutely"), "the start-up tick", timeout_s=30)
        proxy.stop()  # RabbitMQ goes away before the next tick

        def died_or(done: Any) -> Any:
            return lambda: scheduler.poll() is not None or done()

        fault.wait_until(died_or(lambda: "not sent (attempt 1" in log_path.read_text()), "a failed send", 30)
        proxy.start()
        ran_twice = died_or(lambda: len(fault.ledger.sequence("ticks", "minutely")) >= 2)
        fault.wait_until(ran_twice, "the retried tick", timeout_s=30)
        alive = scheduler.poll() is None
    finally:
        stop_process(scheduler, timeout_s=30)

    text = log_path.read_text()
    failures = [line for line in text.splitlines() if "not sent (attempt" in line]
    ticks = fault.ledger.sequence("ticks", "minutely")
    print(f"\nbroker outage at a tick: scheduler alive {alive}, {len(failures)} failed attempt(s), ticks run {ticks}")
    assert alive
    assert failures
    assert "Traceback" not in text
    assert len(ticks) == len(set(ticks)) == 2
    assert ticks[1] - ticks[0] == 60_000


def test_a_tick_that_cannot_be_sent_while_due_is_given_up_with_one_line_per_attempt(
    fault: Fault, caplog: pytest.LogCaptureFixture
) -> None:
    nobody_listens = "amqp://guest:guest@127.0.0.1:1/%2F"
    app = build_app(
        Settings.from_values(
            {
                "namespace": fault.app.settings.namespace,
                "broker": {"url": nobody_listens, "connection_attempts": 1, "retry_delay_s": 0},
                "store": {"url": fault.app.settings.store.url},
            }
        )
    )
    try:
        job = dramatiq.actor(broker=app.broker, actor_name="nightly", periodic=cron("0 2 * * *"))(lambda: None)
        with pytest.raises(BrokerUnavailable):
            job.send()  # what stock periodiq lets through, and exits on
        Scheduler([job], due_for_s=3).send_actors([job], pendulum.now().replace(microsecond=0))
    finally:
        app.close()

    lines = [r for r in caplog.records if r.name == "pipelines.scheduler"]
    print(f"\ngiven-up tick: {len(lines)} line(s): {[r.getMessage()[:50] for r in lines]}")
    assert len(lines) >= 2  # retried at least once within the 3 s the tick was due, then given up
    assert [r.levelname for r in lines] == ["WARNING"] * (len(lines) - 1) + ["ERROR"]
    assert all(f"attempt {n}:" in r.getMessage() for n, r in enumerate(lines, 1))
    assert "no longer due, so the check job counts it as missed" in lines[-1].getMessage()
    assert all(r.exc_info is None for r in lines)
