"""The web console, ``pipelines ui``: runs, a run's graph, dead letters, queues and workers, and a JSON API.

``data`` is the console's one way into the app; ``web`` serves the pages and ``/api/`` on Starlette;
``security`` guards the actions (a token in a header, the request's origin and host checked).
Starlette, uvicorn and Jinja2 come with the ``ui`` extra: ``pip install 'rabbit-pipelines[ui]'``.
"""
