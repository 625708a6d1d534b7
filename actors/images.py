"""Image thumbnails: fetch the original once, render every size in parallel, publish the gallery."""

from __future__ import annotations

import hashlib
from typing import Any

import dramatiq


@dramatiq.actor(queue_name="images")
def fetch_image(url: str) -> dict[str, Any]:
    """Download the original and record its id and size (simulated from the URL)."""
    digest = hashlib.sha256(url.encode()).digest()
    return {"image_id": digest.hex()[:12], "width": 2000 + digest[0], "height": 1500 + digest[1]}


@dramatiq.actor(queue_name="images")
def make_thumbnail(size: int, image: dict[str, Any]) -> dict[str, Any]:
    """Render one thumbnail, keeping the aspect ratio."""
    height = round(image["height"] * size / image["width"])
    return {"key": f"thumbs/{image['image_id']}/{size}.jpg", "width": size, "height": height}


@dramatiq.actor(queue_name="images")
def publish_gallery(thumbnails: list[dict[str, Any]]) -> dict[str, Any]:
    """Publish the thumbnails, smallest first."""
    return {"thumbnails": [t["key"] for t in sorted(thumbnails, key=lambda t: t["width"])]}
