"""The queues page's charts: minutes of counts drawn as SVG paths, with gaps where nothing ran."""

from __future__ import annotations

from pipelines.console.charts import HEIGHT, WIDTH, hour_charts, path
from pipelines.store.counts import ActorCounts, MinuteCounts


def test_a_path_spans_the_box_scales_to_its_peak_and_starts_again_after_a_gap() -> None:
    drawn = path([0.0, 2.0, None, 1.0, 4.0], peak=4.0)

    step = WIDTH / 4
    assert (
        drawn
        == f"M0.0,{HEIGHT:.1f} h0 L{step:.1f},{HEIGHT / 2:.1f} M{3 * step:.1f},{HEIGHT * 3 / 4:.1f} h0 L{WIDTH:.1f},0.0"
    )


def test_the_charts_add_every_actor_up_per_minute_and_time_is_shown_only_where_messages_ran() -> None:
    minutes = [
        MinuteCounts(0, {"a": ActorCounts(2, 1, 0, 300, 200), "b": ActorCounts(1, 0, 1, 100, 100)}),
        MinuteCounts(60_000, {}),
    ]

    throughput, failures, latency = hour_charts(minutes)

    assert throughput.series[0].values == (3, 0)
    assert [(s.name, s.values, s.total) for s in failures.series] == [
        ("failed", (1, 0), 1),
        ("dead-lettered", (1, 0), 1),
    ]
    assert [(s.name, s.values) for s in latency.series] == [("mean", (400 / 3 / 1000, None)), ("slowest", (0.2, None))]
    assert (latency.peak, latency.minutes) == (0.2, 2)
