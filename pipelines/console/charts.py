"""The queues page's small charts of the last hour: throughput, failures and processing time per minute.

They are drawn from the message counts the workers add to the run store with their heartbeats
(:mod:`pipelines.store.counts`), so they need no Prometheus and show every worker process of the
namespace. Each chart is an inline SVG the server renders (no script, nothing fetched): a path per
series, in a box of :data:`WIDTH` by :data:`HEIGHT` units, the last minute (still being counted) at the
right edge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipelines.store.counts import ActorCounts, MinuteCounts

#: The drawing's box, in SVG units (the page scales it to the card's width).
WIDTH, HEIGHT = 300, 60


@dataclass(frozen=True)
class Series:
    """One line of a chart: its values by minute (None where there is nothing to show) and its path."""

    name: str
    values: tuple[float | None, ...]
    path: str
    """The SVG path of the line (``M`` where it starts again after a gap)."""
    total: float
    """The values added up (for counts), or the largest (for times)."""


@dataclass(frozen=True)
class Chart:
    """One chart: its series share the vertical scale from 0 to ``peak``."""

    name: str
    title: str
    unit: str
    series: tuple[Series, ...]
    peak: float
    minutes: int


def path(values: Sequence[float | None], peak: float) -> str:
    """The SVG path through ``values`` (one a minute, evenly spaced) scaled to ``peak``; gaps at None."""
    if not values:
        return ""
    step = WIDTH / max(1, len(values) - 1)
    parts: list[str] = []
    drawing = False
    for i, value in enumerate(values):
        if value is None:
            drawing = False
            continue
        y = HEIGHT - (value / peak * HEIGHT if peak > 0 else 0.0)
        # A line starts with a zero-length segment: its round cap shows a minute that stands alone.
        parts.append(f"L{i * step:.1f},{y:.1f}" if drawing else f"M{i * step:.1f},{y:.1f} h0")
        drawing = True
    return " ".join(parts)


def _chart(name: str, title: str, unit: str, lines: Sequence[tuple[str, Sequence[float | None], bool]]) -> Chart:
    """A chart of ``lines``: (name, values, whether its total is the largest value rather than the sum)."""
    peak = max((v for _, values, _ in lines for v in values if v is not None), default=0.0)
    series = tuple(
        Series(
            line,
            tuple(values),
            path(values, peak),
            max((v for v in values if v is not None), default=0.0) if largest else sum(v or 0.0 for v in values),
        )
        for line, values, largest in lines
    )
    return Chart(name, title, unit, series, peak, len(lines[0][1]) if lines else 0)


def hour_charts(minutes: Sequence[MinuteCounts]) -> tuple[Chart, ...]:
    """Throughput, failures and processing time per minute over ``minutes``, every actor added up."""
    totals = [minute.total() for minute in minutes]

    def each(measure: Callable[[ActorCounts], float | None]) -> list[float | None]:
        return [measure(total) for total in totals]

    return (
        _chart("throughput", "Processed", "messages a minute", [("processed", each(lambda c: c.processed), False)]),
        _chart(
            "failures",
            "Failed and dead-lettered",
            "messages a minute",
            [("failed", each(lambda c: c.failed), False), ("dead-lettered", each(lambda c: c.dead_lettered), False)],
        ),
        _chart(
            "latency",
            "Processing time",
            "seconds",
            [
                ("mean", each(lambda c: c.mean_s), True),
                ("slowest", each(lambda c: c.slowest_ms / 1000 if c.processed else None), True),
            ],
        ),
    )
