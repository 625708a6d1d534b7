"""What the console reads from the workers' metrics endpoints: message counts, queue ages, heartbeats.

Rates are differences between two reads (as ``pipelines top`` does); a worker is alive while its
heartbeat is recent. An endpoint that does not answer is reported, never fatal: only the numbers
that need it are missing.
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from pipelines.observability.metrics_dir import NAMESPACE_LABEL

#: Seconds to wait for one metrics endpoint.
SCRAPE_TIMEOUT_S = 2.0
#: Seconds between two reads of the endpoints by one console, at least (rates need two reads).
MIN_INTERVAL_S = 1.0
#: Samples the console reads, and nothing else.
PROCESSED = "pipelines_messages_processed_total"
FAILED = "pipelines_messages_failed_total"
IN_FLIGHT = "pipelines_messages_in_flight"
OLDEST_AGE = "pipelines_queue_oldest_message_age_seconds"
HEARTBEAT = "pipelines_worker_heartbeat_timestamp_seconds"


@dataclass
class Sample:
    """One read of every endpoint: counts per actor, oldest age per queue, heartbeats per process."""

    at: float
    processed: dict[str, float] = field(default_factory=dict)
    failed: dict[str, float] = field(default_factory=dict)
    in_flight: dict[str, float] = field(default_factory=dict)
    """actor → messages being processed now."""
    oldest_age_s: dict[str, float] = field(default_factory=dict)
    heartbeats: dict[tuple[str, str], float] = field(default_factory=dict)
    """(endpoint, pid) → epoch seconds of the last heartbeat (pid "" for a worker of one process)."""
    unreachable: list[str] = field(default_factory=list)
    """Endpoints that did not answer, with the reason."""


def read(endpoints: list[str], namespace: str | None = None) -> Sample:
    """Read every endpoint once (sums over the endpoints for counts), only ``namespace``'s series if given."""
    sample = Sample(at=time.time())
    for url in endpoints:
        try:
            with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
                text = response.read().decode()
        except (OSError, ValueError) as e:
            sample.unreachable.append(f"{url}: {e}")
            continue
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if namespace is not None and s.labels.get(NAMESPACE_LABEL) != namespace:
                    continue
                if s.name in (PROCESSED, FAILED, IN_FLIGHT):
                    table = {PROCESSED: sample.processed, FAILED: sample.failed, IN_FLIGHT: sample.in_flight}[s.name]
                    actor = s.labels.get("actor", "?")
                    table[actor] = table.get(actor, 0.0) + s.value
                elif s.name == OLDEST_AGE:
                    queue = s.labels.get("queue", "?")
                    sample.oldest_age_s[queue] = max(sample.oldest_age_s.get(queue, 0.0), s.value)
                elif s.name == HEARTBEAT:
                    sample.heartbeats[(url, s.labels.get("pid", ""))] = s.value
    return sample


def rate(before: Sample | None, now: Sample, table: str, actor: str) -> float | None:
    """Per second between two reads, for one actor (None without an earlier read)."""
    if before is None or now.at <= before.at:
        return None
    counts_now: dict[str, float] = getattr(now, table)
    counts_before: dict[str, float] = getattr(before, table)
    return max(0.0, counts_now.get(actor, 0.0) - counts_before.get(actor, 0.0)) / (now.at - before.at)
