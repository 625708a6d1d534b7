"""Ports on loopback that take TCP connections and then serve nothing: a broker that is stuck (keeps
them open, silent) or one that is starting (closes each at once). Each counts the connections it took."""

from __future__ import annotations

import contextlib
import socket
import threading


class StuckServer:
    """Listens on ``port`` until :meth:`close`; :attr:`taken` counts the connections it accepted."""

    def __init__(self, *, close_at_once: bool) -> None:
        self.close_at_once = close_at_once
        self.taken = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def _accept(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                connection = self._listener.accept()[0]
                self.taken += 1
                if self.close_at_once:
                    connection.close()
                else:
                    self._open.append(connection)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for connection in self._open:
            connection.close()
        self._listener.close()
