"""Benchmarks of rabbit-pipelines against bare Dramatiq, Celery and raw pika, on the same broker.

Run ``make bench`` (or ``python -m bench --help``). Every case runs every system, alternating them
over several rounds, and reports medians and the ratios the project tracks.
"""
