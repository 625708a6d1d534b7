# The image of the worker (`dramatiq actors`), the scheduler (`pipelines scheduler actors`) and the console (`pipelines ui`).
# Pinned to a patch release and a Debian release (the test machine's: Debian 12, Python 3.11): a rebuild
# gets the same interpreter. Move it on deliberately, with the test suite.
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The workdir holds config.toml, which the processes read from their current directory.
WORKDIR /app
COPY . .
RUN pip install --no-cache-dir ".[ui]" \
    && useradd --system --uid 10001 --no-create-home pipelines

USER pipelines
CMD ["dramatiq", "actors"]
