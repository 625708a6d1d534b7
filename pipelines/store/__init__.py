"""Run stores: Redis for production, memory for the embedded mode (see ``base`` for the contract)."""

from __future__ import annotations

from pipelines.config import StoreConfig
from pipelines.store.base import Advance, Claim, NewRun, RunStatus, RunStore, StepStatus
from pipelines.store.memory import MemoryRunStore
from pipelines.store.redis import RedisRunStore

__all__ = [
    "Advance",
    "Claim",
    "MemoryRunStore",
    "NewRun",
    "RedisRunStore",
    "RunStatus",
    "RunStore",
    "StepStatus",
    "make_store",
]


def make_store(config: StoreConfig, *, namespace: str) -> RunStore:
    """The store ``config.url`` names: ``memory://`` or a Redis URL."""
    if config.is_memory:
        return MemoryRunStore(retention_s=config.retention_s)
    return RedisRunStore(url=config.url, namespace=namespace, retention_s=config.retention_s)
