"""A console served on the real RabbitMQ and Redis, with a worker and example actors, for API and browser tests.

Each test module gets one app in a namespace of its own (its queues and keys deleted afterwards), one
worker for its actors and one console served by uvicorn in a thread on a free port; tests tell their
runs apart by pipeline name. The app traces every run (spans kept in memory, the console linking each
trace id to ``JAEGER_URL``) and seals what its ``vault`` actor encrypts. Browser tests drive Debian's
Chromium through Playwright, with the flags a root user in a container needs, and leave screenshots in
``test-artifacts/console/``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import uvicorn
from cryptography.fernet import Fernet
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pipelines
from pipelines.app import App, build_app
from pipelines.broker import ExchangeBroker
from pipelines.config.settings import Settings
from pipelines.console.web import build_console
from pipelines.middleware import Metrics
from pipelines.observability.metrics_http import serve_http
from pipelines.store import RedisRunStore
from pipelines.testing import boot
from tests.support.housekeeping import fresh_namespace
from tests.support.ports import free_port

AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "test-token-" + uuid.uuid4().hex[:8]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
#: Where the console links trace ids (nothing answers there: the tests only read the links).
JAEGER_URL = "http://jaeger.test:16686"
#: The password in the database URL that ``connect``'s errors name (the console must never show it).
DB_PASSWORD = "s3cret-pw"


@dataclass
class Actors:
    """The example actors of a console test module, and the switches tests turn."""

    double: dramatiq.Actor[Any, Any]
    total: dramatiq.Actor[Any, Any]
    echo: dramatiq.Actor[Any, Any]
    flaky: dramatiq.Actor[Any, Any]
    slow: dramatiq.Actor[Any, Any]
    vault: dramatiq.Actor[Any, Any]
    """Encrypts: its arguments and result are sealed; a ``pan`` that is not digits fails it."""
    connect: dramatiq.Actor[Any, Any]
    """Fails as a database driver does, naming its URL with :data:`DB_PASSWORD` in it."""
    notify: dramatiq.Actor[Any, Any]
    """Only ever sent as a plain message (``send()``), in no run; a text starting "fail:" fails it."""
    broken: threading.Event = field(default_factory=threading.Event)
    """While set, ``flaky`` raises."""
    release: threading.Event = field(default_factory=threading.Event)
    """Ends every ``slow`` call."""


def declare_actors(app: App) -> Actors:
    broken, release = threading.Event(), threading.Event()
    broken.set()

    def double(x: int) -> int:
        return x * 2

    def total(*values: int | list[int]) -> int:
        return sum(sum(v) if isinstance(v, list) else v for v in values)

    def echo(text: str) -> str:
        if text.startswith("fail:"):
            raise ValueError(text)
        return text

    def flaky(x: int) -> int:
        logging.getLogger("tests.console").warning("asking the payment service about order %s", x)
        if broken.is_set():
            raise ConnectionError(f"the payment service refused order {x}")
        return x + 1

    def slow(seconds: float, *previous: Any) -> str:
        deadline = time.monotonic() + seconds
        while not release.wait(0.2) and time.monotonic() < deadline:
            left = max(0.0, deadline - time.monotonic())
            pipelines.report_progress(1 - left / seconds, f"{seconds - left:.0f} of {seconds:.0f} s")
        return "slept"

    def vault(pan: str, *previous: Any) -> str:
        if not pan.isdigit():
            raise ValueError("that is not a card number")
        return pan[-4:]

    def connect(database: str, *previous: Any) -> None:
        raise ConnectionError(f"could not connect to postgresql://orders:{DB_PASSWORD}@db.internal:5432/{database}")

    def notify(text: str) -> None:
        if text.startswith("fail:"):
            raise ValueError(text)

    def declare(fn: Callable[..., Any], **options: Any) -> dramatiq.Actor[Any, Any]:
        made: dramatiq.Actor[Any, Any] = dramatiq.actor(
            broker=app.broker, actor_name=fn.__name__, queue_name="console", **options
        )(fn)
        return made

    return Actors(
        declare(double),
        declare(total),
        declare(echo),
        declare(flaky),
        declare(slow),
        declare(vault, encrypt=True),
        declare(connect),
        declare(notify),
        broken,
        release,
    )


@dataclass
class Console:
    app: App
    actors: Actors
    url: str
    token: str = TOKEN

    def pipeline_name(self, what: str) -> str:
        """A pipeline name of this test's own, to find its runs among the module's."""
        return f"{what}-{uuid.uuid4().hex[:6]}"


def console_settings(metrics_port: int) -> Settings:
    """A fresh namespace on the real services: no retries (a failure is a dead letter at once), few delay
    tiers, the worker's metrics where the console reads them (heartbeats, and those in the run store, every
    0.5 s), every run traced,
    and a key to seal with."""
    return Settings.from_values(
        {
            "namespace": fresh_namespace(),
            "broker": {"url": AMQP_URL, "delay_tiers_s": [0.1, 1.0, 5.0]},
            "store": {"url": REDIS_URL},
            "retries": {"max_retries": 0, "min_backoff_s": 0.05, "max_backoff_s": 0.2},
            "metrics": {"enabled": True, "multiprocess": False, "heartbeat_interval_s": 0.5},
            "worker": {"heartbeat_s": 0.5},
            "telemetry": {"enabled": True, "sample_ratio": 1.0},
            "encryption": {"keys": [Fernet.generate_key().decode()]},
            "ui": {
                "token": TOKEN,
                "refresh_s": 0.5,
                "metrics_urls": [f"http://127.0.0.1:{metrics_port}/metrics"],
                "jaeger_url": JAEGER_URL,
            },
        }
    )


@contextlib.contextmanager
def served_console(app: App) -> Iterator[str]:
    """``app``'s console served by uvicorn in a thread on a free port of 127.0.0.1; yields its URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_console(app), host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="console", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "the console stopped at start"
        assert time.monotonic() < deadline, "the console did not start within 10 s"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def console(services: None) -> Iterator[Console]:
    """An app with the example actors and a worker, and its console on a free port (module-wide)."""
    metrics_port = free_port()
    app = build_app(console_settings(metrics_port), span_exporter=InMemorySpanExporter())
    actors = declare_actors(app)
    boot(app)
    worker = dramatiq.Worker(app.broker, worker_threads=4, worker_timeout=100)
    worker.start()
    # What the `dramatiq` CLI's metrics process does for a worker: serve its samples on a port.
    metrics = next(m for m in app.broker.middleware if isinstance(m, Metrics))
    metrics_server = serve_http(
        "127.0.0.1", metrics_port, metrics.registry, namespace=app.settings.namespace, health=lambda: None
    )
    try:
        with served_console(app) as url:
            yield Console(app, actors, url)
    finally:
        actors.release.set()
        worker.stop()
        metrics_server.shutdown()
        metrics_server.server_close()
        assert isinstance(app.broker, ExchangeBroker)
        assert isinstance(app.store, RedisRunStore)
        app.broker.delete_topology()
        app.store.delete_namespace()
        app.close()


@pytest.fixture(scope="module")
def browser_context() -> Iterator[Any]:
    """A headless Chromium (Debian's) with a fresh profile, driven by Playwright."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the console's browser tests need Debian's chromium. Run `make tools` "
            "(or as root: apt-get install -y chromium chromium-driver).",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright, tempfile.TemporaryDirectory(prefix="console-chromium-") as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1360, "height": 900},
        )
        context.set_default_timeout(15_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser_context: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh tab; any JavaScript dialog fails the test (nothing in the console opens one)."""
    tab = browser_context.new_page()
    dialogs: list[str] = []

    def dialog_opened(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    tab.on("dialog", dialog_opened)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    tab.close()
    assert dialogs == [], f"a dialog opened: {dialogs}"
    assert errors == [], f"the page's script failed: {errors}"


@pytest.fixture
def shoot(page: Any, request: pytest.FixtureRequest) -> Callable[[str], Path]:
    """``shoot(name)``: a full-page screenshot into test-artifacts/console/ (kept, never committed)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = ARTIFACTS / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
