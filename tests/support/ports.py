"""Free loopback ports for servers a test starts, taken outside the kernel's ephemeral range.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, which every outgoing
connection (AMQP, Redis, HTTP) also draws its local port from: between the probe and the server's own
bind, one of the suite's many client connections can take it. Ports below that range are never given
to an outgoing connection, and this process never hands the same one out twice.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

_LOWEST = 20000
_handed_out: set[int] = set()
_lock = threading.Lock()


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback TCP port nothing listens on now and no outgoing connection will be given."""
    ceiling = _ephemeral_floor()
    with _lock:
        for _ in range(1000):
            port = random.randrange(_LOWEST, ceiling)
            if port in _handed_out:
                continue
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free loopback port between {_LOWEST} and {ceiling}")
