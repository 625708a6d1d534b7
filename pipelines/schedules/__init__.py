"""Scheduled jobs: periodiq's ticks, claimed once each (``ticks``). The scheduler process is
``pipelines scheduler`` (``pipelines.cli.scheduler``); the worker side is the ``Schedules`` middleware.
"""
