"""Rate limits: slots taken in the run store before a rate-limited actor runs (``limiter``). The
option's value is parsed in ``pipelines.wire.rates``; the worker side is the ``RateLimits`` middleware.
"""
