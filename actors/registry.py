"""The example pipelines by name: ``actors`` registers them on its app, so `pipelines run NAME`,
the demo and the example actors (``start_fulfilment``, ``nightly_report``) start them by name.

An entry is either a pipeline (its run's arguments go to the first steps) or a factory that builds
one from the run's arguments (when the shape depends on them, such as the number of users).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from actors.images import fetch_image, make_thumbnail, publish_gallery
from actors.notifications import notify_user, summarize_notifications
from actors.orders import (
    charge_payment,
    complete_order,
    reserve_inventory,
    schedule_shipping,
    send_order_confirmation,
)
from actors.reports import build_report, load_shard
from pipelines.composition import Node, chain, chord, fan_out, group, step

if TYPE_CHECKING:
    from pipelines.app import App

#: Thumbnail widths, in pixels.
THUMBNAIL_SIZES = (64, 256, 1024)


def notify_users(campaign: str, users: int = 2000) -> Node:
    """One notification per user (ids 1..users), then one summary with every outcome."""
    return chord(
        group(step(notify_user, user_id, campaign) for user_id in range(1, users + 1)),
        then=step(summarize_notifications, campaign),
    )


def shard_report(day: str, shards: int = 8) -> Node:
    """Load every shard of ``day`` in parallel, then build the report from all of them."""
    return chord(group(step(load_shard, shard, day) for shard in range(shards)), then=step(build_report, day))


PIPELINES: Mapping[str, Node | Callable[..., Node]] = {
    "order_fulfilment": chain(
        charge_payment,
        fan_out(reserve_inventory, schedule_shipping, send_order_confirmation),
        complete_order,
    ),
    "thumbnails": chain(
        fetch_image,
        group(step(make_thumbnail, size) for size in THUMBNAIL_SIZES),
        publish_gallery,
    ),
    "notify_users": notify_users,
    "shard_report": shard_report,
}


def register_all(app: App) -> None:
    """Register every example pipeline on ``app`` under its name."""
    for name, pipeline in PIPELINES.items():
        app.register(name, pipeline)
