"""Building the app from config, and the process's one configured app (``configure()``)."""

from __future__ import annotations

import threading

import dramatiq
from opentelemetry.sdk.trace.export import SpanExporter

from pipelines.app.application import App
from pipelines.broker import make_broker
from pipelines.config.settings import Settings, load_settings
from pipelines.current import configured_app, get_app, set_app
from pipelines.errors import ConfigError
from pipelines.flow.runtime import Runtime
from pipelines.observability import telemetry
from pipelines.payloads.sealing import Sealer
from pipelines.rate_limits.limiter import RateLimiter
from pipelines.sending.outbound import Outbound
from pipelines.stack import build_middleware
from pipelines.store import make_store


def build_app(settings: Settings, *, span_exporter: SpanExporter | None = None) -> App:
    """A new app from ``settings``; nothing connects until the first publish, consume or store call.

    ``span_exporter`` replaces the OTLP exporter (tests use the SDK's in-memory one).
    """
    store = make_store(settings.store, namespace=settings.namespace)
    provider = tracer = None
    if settings.telemetry.enabled:
        provider = telemetry.make_tracer_provider(settings.telemetry, exporter=span_exporter)
        tracer = telemetry.install(provider)
    sealer = Sealer(settings.encryption.keys) if settings.encryption.keys else None
    runtime = Runtime(
        store=store,
        lease_s=settings.store.step_lease_s,
        max_result_bytes=settings.store.max_result_bytes,
        tracer=tracer,
        sealer=sealer,
    )
    middleware = build_middleware(settings, runtime, store, tracer=tracer)
    outbound = Outbound(
        sealer=sealer,
        limiter=RateLimiter(store),
        warn_bytes=settings.broker.warn_message_bytes,
        large_policy=settings.broker.large_message_policy,
        consumer_timeout_s=settings.broker.consumer_timeout_s,
    )
    broker = make_broker(
        settings.broker, namespace=settings.namespace, outbound=outbound, middleware=middleware, marks=store
    )
    return App(settings=settings, broker=broker, store=store, runtime=runtime, tracer_provider=provider)


def configure(settings: Settings | None = None) -> App:
    """The process's app: built from ``settings`` (or ``config.toml``) on the first call, then reused.

    Its broker becomes Dramatiq's global broker, so ``@dramatiq.actor`` declares actors on it.

    Raises:
        ConfigError: The configuration is invalid, or a different one was configured already.
    """
    with _lock:
        existing = _configured()
        if existing is not None:
            if settings is not None and settings != existing.settings:
                raise ConfigError("pipelines.configure() was already called with a different configuration.")
            return existing
        app = build_app(settings or load_settings())
        dramatiq.set_broker(app.broker)
        set_app(app)
        return app


_lock = threading.Lock()


def current_app() -> App:
    """The app ``pipelines.configure()`` set up.

    Raises:
        DefinitionError: ``configure()`` was not called in this process.
    """
    app = configured_app()
    assert isinstance(app, App), "pipelines.current holds the App that configure() made"
    return app


def _configured() -> App | None:
    app = get_app()
    assert app is None or isinstance(app, App)
    return app
