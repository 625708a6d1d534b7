"""Starting runs from many producer threads: each ``app.start`` returns only once its run is stored and
its first step's publish confirmed, and the threads' stores and publishes share round trips (group
commit). No worker runs meanwhile; the queued first steps are purged afterwards.
"""

from __future__ import annotations

import threading
import time

from bench.systems import Ours
from pipelines import chain, step

#: Producer threads, as a web server's worker threads would start runs.
THREADS = 8


def starts(system: Ours, n: int) -> dict[str, float]:
    """Starts per second of ``n`` 3-step chains from ``THREADS`` threads, and producer CPU per start."""
    m = system.actors
    pipeline = chain(step(m.hop, "starts"), step(m.hop, "starts"), step(m.last, "starts"))
    system.purge()
    system.app.start(pipeline)  # connections and scripts ready before the clock starts

    def start_some() -> None:
        for _ in range(n // THREADS):
            system.app.start(pipeline)

    threads = [threading.Thread(target=start_some) for _ in range(THREADS)]
    cpu_before, began = time.process_time(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu_before
    system.purge()
    started = n // THREADS * THREADS
    return {"starts_per_s": started / elapsed, "producer_cpu_us_per_start": 1e6 * cpu / started}
