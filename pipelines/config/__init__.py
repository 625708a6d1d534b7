"""Configuration: the sections of ``config.toml`` (``sections``), how they are read and overridden
(``settings``), how their URLs are checked (``urls``, ``redis_urls``), how a bad value is told
(``problems``), how secrets are masked wherever values are shown (``masking``), and which of the user's
modules to import (``modules``).

Importing this package imports nothing: each module is imported where it is used (``masking`` is used
by logging, which must not load pydantic).
"""
