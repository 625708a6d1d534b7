"""Traces and metrics of a stock `dramatiq actors` worker process, read as Jaeger and Prometheus would.

An OTLP/HTTP receiver in this test decodes what the worker exports (protobuf, with the
``opentelemetry-proto`` package); the worker's metrics port is scraped like Prometheus does, and
scraped once by a real Prometheus (Debian's prometheus package, which `make tools` installs; the test
fails without it).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client.parser import text_string_to_metric_families

from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port
from tests.support.tools import installed

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TIMEOUT_S = 60


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: keeps every span posted to /v1/traces."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.changed = threading.Condition()
        super().__init__(("127.0.0.1", free_port()), _OtlpHandler)

    def wait_for(self, done: Callable[[list[Span]], bool]) -> list[Span]:
        with self.changed:
            if not self.changed.wait_for(lambda: done(self.spans), TIMEOUT_S):
                raise AssertionError(f"the receiver got {len(self.spans)} spans, not what the test waits for")
            return list(self.spans)


class _OtlpHandler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
        with self.server.changed:
            self.server.spans.extend(spans)
            self.server.changed.notify_all()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def environment(namespace: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "OTEL_", "PROMETHEUS_"))}
    return env | {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_STORE__URL": REDIS_URL,
        "PIPELINES_RETRIES__MAX_RETRIES": "0",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export batches every 0.1 s instead of 5 s
        **extra,
    }


class Worker:
    def __init__(self, env: dict[str, str], log: Path, *, processes: int = 2) -> None:
        with log.open("w") as out:
            self.process = start_process(
                [str(BIN / "dramatiq"), "actors", "--processes", str(processes), "--threads", "4"],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=out,
            )
        self.log = log

    def stop(self) -> None:
        stop_process(self.process, timeout_s=TIMEOUT_S)


def pipelines(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "pipelines"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


BRANCHES = ("reserve_inventory", "schedule_shipping", "send_order_confirmation")


def test_a_run_processed_by_a_dramatiq_worker_arrives_at_an_otlp_receiver_as_one_trace(
    receiver: Receiver, namespaces: Callable[[], str], tmp_path: Path
) -> None:
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    env = environment(
        namespaces(),
        PIPELINES_TELEMETRY__ENABLED="true",
        PIPELINES_TELEMETRY__ENDPOINT=endpoint,
        PIPELINES_TELEMETRY__SAMPLE_RATIO="1.0",
    )
    worker = Worker(env, tmp_path / "worker.log")
    try:
        run = pipelines(env, "run", "order_fulfilment", "--arg", "order_id=5", "--arg", "total=10", "--wait")
        assert run.returncode == 0, run.stdout + run.stderr + worker.log.read_text()[-2000:]
        consumers = receiver.wait_for(lambda spans: sum(s.kind == Span.SPAN_KIND_CONSUMER for s in spans) >= 5)
    finally:
        worker.stop()

    status = json.loads(pipelines(env, "status", run.stdout.split()[0], "--json").stdout)
    by_id = {span.span_id: span for span in consumers}
    processed = [span for span in consumers if span.kind == Span.SPAN_KIND_CONSUMER]
    assert {span.trace_id.hex() for span in consumers} == {status["trace_id"]}
    assert sorted(span.name.rsplit(".", 1)[-1] for span in processed) == [
        "charge_payment",
        "complete_order",
        "reserve_inventory",
        "schedule_shipping",
        "send_order_confirmation",
    ]
    # Every processing span's parent is the publish that delivered it, or, for a step run locally where
    # the step before it finished, that step's own processing span.
    for span in processed:
        assert by_id[span.parent_span_id].kind in (Span.SPAN_KIND_PRODUCER, Span.SPAN_KIND_CONSUMER)
    branches = [s for s in processed if s.name.split(".")[-1] in BRANCHES]
    assert len({s.parent_span_id for s in branches}) == 1  # the three branches share one publish
    assert by_id[branches[0].parent_span_id].kind == Span.SPAN_KIND_PRODUCER
    [callback] = [s for s in processed if s.name.endswith("complete_order")]
    assert len(callback.links) == 3


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Samples by name and labels, summed over processes (the namespace label becomes the key ``namespaces``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {"namespaces": {}}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples["namespaces"][(("namespace", sample.labels.get("pipelines_namespace", "")),)] = 1
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in ("pid", "pipelines_namespace")))
            samples.setdefault(sample.name, {})[labels] = samples.get(sample.name, {}).get(labels, 0) + sample.value
    return samples


def wait_for_scrape(port: int, done: Callable[[dict[str, Any]], bool], log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_S
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = scrape(port)
            if done(last):
                return last
        except OSError:
            pass  # the metrics process is still starting
        time.sleep(0.2)  # another process's state; nothing to subscribe to
    raise AssertionError(f"metrics never matched; last scrape: {sorted(last)}\n{log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def prometheus() -> str:
    """The prometheus binary; the test fails (never skips) without it."""
    return installed("prometheus", "prometheus")


def test_a_workers_metrics_count_what_happened_on_one_port_for_all_its_processes(
    namespaces: Callable[[], str], prometheus: str, tmp_path: Path
) -> None:
    port = free_port()
    env = environment(
        namespaces(),
        PIPELINES_METRICS__ENABLED="true",
        PIPELINES_METRICS__PORT=str(port),
        PIPELINES_METRICS__MULTIPROCESS_DIR=str(tmp_path / "samples"),
        PIPELINES_METRICS__QUEUE_SAMPLE_INTERVAL_S="0.5",
        PIPELINES_METRICS__HEARTBEAT_INTERVAL_S="0.5",
    )
    worker = Worker(env, tmp_path / "worker.log")
    try:
        for order_id in range(3):
            ok = pipelines(
                env, "run", "order_fulfilment", "--arg", f"order_id={order_id}", "--arg", "total=5", "--wait"
            )
            assert ok.returncode == 0, ok.stdout + ok.stderr
        failed = pipelines(env, "run", "order_fulfilment", "--arg", "order_id=9", "--arg", "total=0", "--wait")
        assert failed.returncode == 1
        metrics = wait_for_scrape(
            port,
            lambda m: (
                bool(m.get("pipelines_messages_dead_lettered_total"))
                and m.get("pipelines_workers", {}).get((), 0) == 2
                and m.get("pipelines_dead_letter_depth", {}).get(
                    (("queue", f"{env['PIPELINES_NAMESPACE']}.orders.charge_payment.dead"),)
                )
                == 1
            ),
            worker.log,
        )
        scraped = query_with_prometheus(prometheus, port, tmp_path)
    finally:
        worker.stop()

    charge = (("actor", "charge_payment"), ("queue", "orders"))
    assert set(metrics.pop("namespaces")) == {(("namespace", env["PIPELINES_NAMESPACE"]),)}  # on every series
    processed = metrics["pipelines_messages_processed_total"]
    assert processed[charge] == 4
    assert processed[(("actor", "send_order_confirmation"), ("queue", "emails"))] == 3
    assert metrics["pipelines_messages_failed_total"][charge] == 1
    assert metrics["pipelines_messages_dead_lettered_total"][charge] == 1
    assert metrics["pipelines_message_duration_seconds_count"][charge] == 4
    assert metrics["pipelines_runs_total"][(("outcome", "succeeded"), ("pipeline", "order_fulfilment"))] == 3
    assert metrics["pipelines_runs_total"][(("outcome", "failed"), ("pipeline", "order_fulfilment"))] == 1
    assert metrics["pipelines_chord_wait_seconds_count"][(("pipeline", "order_fulfilment"),)] == 3
    assert metrics["pipelines_messages_in_flight"][charge] == 0
    assert len(metrics["pipelines_queue_depth"]) >= 10
    assert not any(("run_id" in dict(labels) or "message_id" in dict(labels)) for m in metrics.values() for labels in m)
    assert scraped == 4


def query_with_prometheus(prometheus: str, port: int, tmp_path: Path) -> float:
    """Let a real Prometheus (the ``prometheus`` binary) scrape the worker once and answer a query."""
    web = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs: [{{job_name: worker, static_configs: [{{targets: ['127.0.0.1:{port}']}}]}}]\n"
    )
    server = start_process(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    query = 'sum(pipelines_messages_processed_total{actor="charge_payment"})'
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                url = f"http://127.0.0.1:{web}/api/v1/query?query={urllib.parse.quote(query)}"
                with urllib.request.urlopen(url, timeout=5) as response:
                    result = json.loads(response.read())["data"]["result"]
                if result:
                    return float(result[0]["value"][1])
            except OSError:
                pass  # still starting
            time.sleep(0.5)  # until Prometheus has scraped once
        raise AssertionError("Prometheus never answered the query")
    finally:
        stop_process(server, timeout_s=TIMEOUT_S)


def test_status_says_not_sampled_of_a_run_that_sampling_left_out(
    receiver: Receiver, namespaces: Callable[[], str]
) -> None:
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    shown = {}
    for ratio in ("0.0", "1.0"):
        env = environment(
            namespaces(),
            PIPELINES_TELEMETRY__ENABLED="true",
            PIPELINES_TELEMETRY__ENDPOINT=endpoint,
            PIPELINES_TELEMETRY__SAMPLE_RATIO=ratio,
        )
        started = pipelines(env, "run", "thumbnails", "--arg", "url=https://example.com/s.jpg")  # no worker
        assert started.returncode == 0, started.stderr
        shown[ratio] = pipelines(env, "status", started.stdout.split()[0]).stdout

    assert re.search(
        r"^trace [0-9a-f]{32} \(not sampled: only its failed or slow steps are traced\)$", shown["0.0"], re.M
    )
    assert re.search(r"^trace [0-9a-f]{32}$", shown["1.0"], re.M)
