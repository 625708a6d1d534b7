python -m venv .venv && . .venv/bin/activate
pip install rabbit-pipelines          # or the path of this repository, or its wheel
