"""Each thread's connection to RabbitMQ for publishing, declaring and inspecting, and pika's errors as ours.

pika's connections are not thread-safe, so, as in Dramatiq, every thread that publishes has its own,
opened on first use and kept open: its confirm channel publishes, its plain channel declares and
inspects (see ``confirms``). An idle connection may have been closed by the server for missed
heartbeats, so declarations and inspections check it first and open another once if it died.

With the nodes of a cluster configured, each new connection tries them all, starting at a random one
(connections spread over the nodes), so a connection lost with its node is opened again on a live one.
"""

from __future__ import annotations

import random
import ssl
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pika
from dramatiq.errors import BrokerError

from pipelines.broker.rabbitmq.confirms import CONNECTION_ERRORS, REFUSED_LOGIN, ConfirmPublisher
from pipelines.broker.rabbitmq.connecting import HANDSHAKE_TIMEOUT
from pipelines.config.sections import BrokerConfig
from pipelines.errors import BrokerAccessRefused, BrokerUnavailable

_T = TypeVar("_T")
_E = TypeVar("_E", bound=BrokerError)

#: How many connections in a row a thread opens for a declaration or an inspection before giving up.
MAX_CONNECT_ATTEMPTS = 2


def node_parameters(config: BrokerConfig) -> list[pika.URLParameters]:
    """pika's parameters of every configured node, with the ``[broker]`` connection settings applied."""
    nodes = [pika.URLParameters(url) for url in config.node_urls]
    for parameters in nodes:
        configure_parameters(parameters, config)
    return nodes


def configure_parameters(parameters: Any, config: BrokerConfig) -> None:
    """Apply the ``[broker]`` connection settings (heartbeat, retries, TLS) to pika's parameters."""
    parameters.heartbeat = config.heartbeat_s
    parameters.connection_attempts = config.connection_attempts
    parameters.retry_delay = config.retry_delay_s
    parameters.blocked_connection_timeout = config.blocked_connection_timeout_s
    if getattr(parameters, "ssl_options", None) is not None and (config.tls.ca_file or config.tls.cert_file):
        parameters.ssl_options = _ssl_options(config)


def _ssl_options(config: BrokerConfig) -> pika.SSLOptions:
    context = ssl.create_default_context(cafile=str(config.tls.ca_file) if config.tls.ca_file else None)
    if config.tls.cert_file:
        context.load_cert_chain(str(config.tls.cert_file), str(config.tls.key_file) if config.tls.key_file else None)
    return pika.SSLOptions(context, server_hostname=config.tls.server_hostname)


def dramatiq_error(kind: type[_E], text: str) -> _E:
    """One of Dramatiq's connection errors, which its worker and CLI know how to handle."""
    return kind(text)


class Connections:
    """The publishing connection of each thread (see the module docstring)."""

    def __init__(self, *, parameters: list[Any], config: BrokerConfig) -> None:
        self.parameters = parameters
        """Every node's connection parameters."""
        self.config = config
        self._local = threading.local()
        self._open: set[ConfirmPublisher] = set()

    def candidates(self) -> list[Any]:
        """The nodes in the order a new connection tries them: all of them, from a random one on."""
        start = random.randrange(len(self.parameters))
        return self.parameters[start:] + self.parameters[:start]

    def publisher(self) -> ConfirmPublisher:
        """This thread's publisher, on a new connection if it has none or its connection closed.

        Raises:
            BrokerUnavailable: RabbitMQ does not answer (BrokerAccessRefused: it refused the login).
        """
        publisher: ConfirmPublisher | None = getattr(self._local, "publisher", None)
        if publisher is None or not publisher.connection.is_open:
            try:
                publisher = ConfirmPublisher(self.candidates(), confirm=self.config.confirm_delivery)
            except CONNECTION_ERRORS as e:
                raise self.unavailable(e) from None
            self._local.publisher = publisher
            self._open.add(publisher)
        return publisher

    def alive(self) -> ConfirmPublisher:
        """This thread's publisher, on a connection checked to be open (checking also answers pending
        heartbeats).

        Raises:
            BrokerUnavailable: No connection stayed open after ``MAX_CONNECT_ATTEMPTS``.
        """
        for attempt in range(1, MAX_CONNECT_ATTEMPTS + 1):
            publisher = self.publisher()
            try:
                publisher.connection.process_data_events(time_limit=0)
            except CONNECTION_ERRORS as e:
                self.drop()
                if attempt == MAX_CONNECT_ATTEMPTS:
                    raise self.unavailable(e) from None
                continue
            return publisher
        raise AssertionError("unreachable")

    def on_channel(self, operation: Callable[[Any], _T]) -> _T:
        """Run a declaration or inspection on this thread's live declaring channel."""
        return operation(self.alive().declare_channel)

    def drop(self) -> None:
        """Close this thread's connection (it broke); the next use opens another."""
        publisher: ConfirmPublisher | None = getattr(self._local, "publisher", None)
        if publisher is not None:
            self._local.publisher = None
            self._open.discard(publisher)
            publisher.close()

    def close(self) -> None:
        """Close every thread's connection."""
        for publisher in list(self._open):
            publisher.close()
        self._open.clear()

    def unavailable(self, error: BaseException) -> BrokerUnavailable:
        """``error`` as BrokerUnavailable (BrokerAccessRefused for a refused login), naming the masked URL."""
        where = f"RabbitMQ at {self.config.masked_url}"
        cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if isinstance(error, REFUSED_LOGIN):
            return BrokerAccessRefused(
                f"{where} refused the connection ({cause}). Check the user name, "
                "password and virtual host in broker.url (or PIPELINES_BROKER__URL), and the user's permissions."
            )
        if isinstance(error, HANDSHAKE_TIMEOUT):
            return BrokerUnavailable(
                f"{where} takes TCP connections but does not answer the AMQP handshake ({cause}). It runs but "
                "serves no connection: most often it is out of file handles (about three per quorum queue; 927 "
                "with the common limit of 1,024 open files). `rabbitmqctl eval 'file_handle_cache:info().'` "
                "shows total_used against total_limit: delete unused queues (`rabbitmqctl list_queues name`, "
                "`rabbitmqctl delete_queue NAME`) or raise its open-file limit, then restart it."
            )
        if len(self.config.node_urls) > 1:
            return BrokerUnavailable(
                f"No node of {where} answers ({cause}). Is a majority of the cluster running? "
                "Check the node addresses in broker.url (or broker.urls)."
            )
        return BrokerUnavailable(
            f"{where} does not answer ({cause}). "
            "Is it running? Try `docker compose up -d rabbitmq`, or set broker.url in config.toml."
        )
