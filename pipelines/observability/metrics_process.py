"""Where the `dramatiq` CLI starts a worker's metrics process, in a module that imports nothing.

The CLI runs a fork function by importing its module in the new process, so that module decides what
the process loads: this one loads ``pipelines.observability.exposition`` alone, not the framework (about 20 MB less).
Worker processes import this module too, and must not import prometheus-client through it: its
multiprocess mode is chosen when prometheus-client is first imported, after the worker set its directory.
"""

from __future__ import annotations


def serve_metrics() -> int:
    """The metrics process (see ``pipelines.observability.exposition``); runs until the CLI stops it."""
    from pipelines.observability.exposition import serve

    return serve()
