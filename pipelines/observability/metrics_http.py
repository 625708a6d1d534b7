"""The HTTP side of metrics: ``/metrics`` with the namespace on every series, and ``/healthz``.

Used by the metrics process of a `dramatiq` worker (``pipelines.observability.exposition``) and by the scheduler.
Every series gets a ``pipelines_namespace`` label here, when served, so two apps scraped by one
Prometheus, or read by `pipelines top`, never add up; ``/healthz`` answers 200 while the process
group is healthy (for Kubernetes probes) and 503 with the reason otherwise.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pipelines.observability.metrics_dir import NAMESPACE_LABEL

#: Path of the health check.
HEALTH_PATH = "/healthz"

Health = Callable[[], str | None]
"""Why the process group is unhealthy, or None when it is healthy."""


class NamespaceLabel(Collector):
    """The series of ``source`` with ``pipelines_namespace`` added to each sample."""

    def __init__(self, source: CollectorRegistry, namespace: str) -> None:
        self.source = source
        self.namespace = namespace

    def collect(self) -> Iterator[Metric]:
        for metric in self.source.collect():
            labelled = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            labelled.samples = [
                sample._replace(labels={**sample.labels, NAMESPACE_LABEL: self.namespace}) for sample in metric.samples
            ]
            yield labelled


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes are not worth a log line each."""


def serve_http(
    host: str, port: int, registry: CollectorRegistry, *, namespace: str, health: Health
) -> ThreadingWSGIServer:
    """Listen on ``host:port`` in a daemon thread; ``shutdown()`` the server returned to stop.

    Raises:
        OSError: the address cannot be listened on (taken, or not this machine's).
    """
    served = CollectorRegistry(auto_describe=False)
    served.register(NamespaceLabel(registry, namespace))
    metrics = make_wsgi_app(served)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTH_PATH:
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        problem = health()
        status = "200 OK" if problem is None else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{problem or 'ok'}\n".encode()]

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("Server", (ThreadingWSGIServer,), {"address_family": family})
    server: ThreadingWSGIServer = make_server(host, port, app, server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="pipelines-metrics-http", daemon=True).start()
    return server
