"""Data exports that take minutes to hours: progress reported as they go, cancellable, resumable."""

from __future__ import annotations

import time

import dramatiq

import pipelines

#: Seconds each chunk of an export takes here (a stand-in for real work).
CHUNK_S = 0.2


@dramatiq.actor(profile="long_running", lease_s=60, timeout_s=4 * 3600)  # on the "long_running" queue
def export_orders(month: str, chunks: int = 10) -> str:
    """Export a month of orders chunk by chunk; a cancelled run stops at the next chunk."""
    for done in range(chunks):
        pipelines.report_progress(done / chunks, f"{done}/{chunks} chunks")
        time.sleep(CHUNK_S)
    pipelines.report_progress(1.0, f"{chunks}/{chunks} chunks")
    return f"exports/orders-{month}.csv"
