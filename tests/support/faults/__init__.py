"""The fault suite's actors, the ledger they write, the worker modules `dramatiq` starts, and its proxies."""
