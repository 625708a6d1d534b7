"""Seeing what runs: traces (``telemetry``, ``tail_sampling``), log lines (``logs``) and metrics
shared by a worker's processes (``metrics_dir``) and served over HTTP (``metrics_http``,
``exposition``, ``metrics_process``). Only these may fail open: a guarantee never waits on them.
"""
