"""A Redis proxy that answers chosen commands with an error reply, as a Redis that cannot serve would.

Why a proxy: the store's client then reads a genuine RESP error reply off its socket (``-READONLY ...``)
and redis-py maps it to its exception exactly as in production, while the real Redis behind it serves
everything else, and the other clients of that Redis (the test, other tests) are not disturbed. Making
the server itself refuse (a replica for READONLY and MASTERDOWN, ``maxmemory`` for OOM, a runaway script
for BUSY) would stall every client, and LOADING cannot be produced on demand at all.

Commands are forwarded one at a time, each reply read whole before the next command (RESP2 and RESP3):
enough for the store's scripts and pipelines. A connection that subscribes is relayed as it is from
then on, both ways at once, so a run's waiter hears what the store's scripts publish.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import socket
import threading
from collections.abc import Callable, Iterator
from importlib import resources
from typing import BinaryIO
from urllib.parse import urlsplit

#: Error replies as Redis words them.
ERROR_REPLIES = {
    "LOADING": b"-LOADING Redis is loading the dataset in memory\r\n",
    "READONLY": b"-READONLY You can't write against a read only replica.\r\n",
    "BUSY": b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n",
    "OOM": b"-OOM command not allowed when used memory > 'maxmemory'.\r\n",
    "MASTERDOWN": b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n",
}


def _read(stream: BinaryIO) -> tuple[bytes, list[bytes]]:  # noqa: PLR0911 (one return per RESP type)
    """One RESP2 or RESP3 value: its raw bytes, and its bulk strings (a command's name and arguments)."""
    line = stream.readline()
    if not line:
        raise EOFError
    kind = line[:1]
    if kind in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return line, []
    if kind in (b"%", b"|"):  # a map (or attributes) of n pairs
        raw = line
        for _ in range(2 * int(line[1:-2])):
            raw += _read(stream)[0]
        return raw + (_read(stream)[0] if kind == b"|" else b""), []
    if kind in (b"~", b">"):
        raw = line
        for _ in range(int(line[1:-2])):
            raw += _read(stream)[0]
        return raw, []
    if kind in (b"!", b"="):
        return line + stream.read(int(line[1:-2]) + 2), []
    if kind == b"$":
        size = int(line[1:-2])
        if size < 0:
            return line, []
        data = stream.read(size + 2)
        return line + data, [data[:-2]]
    if kind == b"*":
        raw, words = line, []
        for _ in range(max(int(line[1:-2]), 0)):
            part, found = _read(stream)
            raw += part
            words += found
        return raw, words
    raise ValueError(f"not RESP2: {line[:40]!r}")


#: Commands after which a connection takes messages Redis pushes unasked (pub/sub).
SUBSCRIBING = {b"SUBSCRIBE", b"PSUBSCRIBE", b"SSUBSCRIBE"}


def _relay(source: io.BufferedReader, target: socket.socket) -> None:
    """Copy what arrives on ``source`` (buffered bytes first) to ``target`` until either closes."""
    with contextlib.suppress(OSError, ValueError):
        while data := source.read1(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


class ErrorProxy:
    """Listens on a free port and forwards to ``upstream``; ``inject(command)`` may return an error reply."""

    def __init__(self, upstream: tuple[str, int], inject: Callable[[list[bytes]], bytes | None]) -> None:
        self.upstream = upstream
        self.inject = inject
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.injected: list[str] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="redis-error-proxy").start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream) as server:
            from_client, from_server = client.makefile("rb"), server.makefile("rb")
            try:
                while True:
                    raw, command = _read(from_client)
                    reply = self.inject(command)
                    if reply is not None:
                        self.injected.append(reply.split(b" ", 1)[0][1:].decode())
                        client.sendall(reply)
                        continue
                    server.sendall(raw)
                    if command and command[0].upper() in SUBSCRIBING:
                        pushed = threading.Thread(target=_relay, args=(from_server, client), daemon=True)
                        pushed.start()
                        _relay(from_client, server)
                        pushed.join()
                        return
                    client.sendall(_read(from_server)[0])
            except (EOFError, OSError, ValueError):
                return

    def url(self, upstream_url: str) -> str:
        """The URL of ``upstream_url``'s database through this proxy."""
        return f"redis://127.0.0.1:{self.port}{urlsplit(upstream_url).path}"

    def close(self) -> None:
        self._stop.set()
        self.server.close()


@contextlib.contextmanager
def error_proxy(upstream_url: str, inject: Callable[[list[bytes]], bytes | None]) -> Iterator[ErrorProxy]:
    """An :class:`ErrorProxy` to the Redis of ``upstream_url`` for the block."""
    parts = urlsplit(upstream_url)
    proxy = ErrorProxy((parts.hostname or "127.0.0.1", parts.port or 6379), inject)
    try:
        yield proxy
    finally:
        proxy.close()


def script_sha(name: str) -> bytes:
    """The SHA1 by which the run store sends its script ``lua/<name>.lua`` (``EVALSHA <sha> ...``)."""
    text = resources.files("pipelines.store").joinpath("lua", f"{name}.lua").read_text()
    return hashlib.sha1(text.encode()).hexdigest().encode()
