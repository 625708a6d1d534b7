"""The custom Dramatiq middleware of rabbit-pipelines, one per module."""

from __future__ import annotations

from middleware.pipeline_steps import PipelineSteps

__all__ = ["PipelineSteps"]
