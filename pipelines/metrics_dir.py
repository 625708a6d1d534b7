"""The directory a worker's processes share their metric samples through, named in the core.

Both sides use it: the ``Metrics`` middleware in every worker process writes there, and the metrics
process (``pipelines.exposition``), which imports no middleware, serves what it finds there.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pipelines.config import MetricsConfig

#: The environment variable prometheus-client reads to pick multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: File in the multiprocess directory listing the queues the metrics process samples.
QUEUES_FILE = "queues.json"


def multiprocess_dir(config: MetricsConfig, namespace: str) -> Path:
    """Where worker processes of ``namespace`` write their samples (the environment variable wins)."""
    if os.environ.get(MULTIPROC_ENV):
        return Path(os.environ[MULTIPROC_ENV])
    return config.multiprocess_dir or Path(tempfile.gettempdir()) / f"pipelines-metrics-{namespace}"
