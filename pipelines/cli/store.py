"""``pipelines store migrate``: create or upgrade a PostgreSQL store's tables, without the app's modules
(a deployment step may run it before any worker starts). A Redis store has nothing to migrate."""

from __future__ import annotations

from pipelines.config.masking import mask_url
from pipelines.config.settings import Settings
from pipelines.store import make_store


def migrate(settings: Settings) -> int:
    """Apply the migrations the store's schema lacks, and say what was done; the exit status."""
    store = make_store(settings.store, namespace=settings.namespace)
    try:
        migrate_store = getattr(store, "migrate", None)
        if migrate_store is None:
            print(f"The store at {mask_url(settings.store.url)} keeps no tables: nothing to migrate.")
            return 0
        applied = migrate_store()
    finally:
        store.close()
    where = f"schema {settings.store.postgres_schema} at {mask_url(settings.store.url)}"
    if applied:
        print(f"Migrated {where} to version {applied[-1]} (applied {', '.join(map(str, applied))}).")
    else:
        print(f"The tables of {where} are up to date.")
    return 0
