# Every way to run anything in this repository. `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: help install demo test test-cluster lint format docs docs-serve all services tools bench console-picture clean

help:
	@echo "make demo      run the example pipelines (RabbitMQ and Redis if they answer, else embedded)"
	@echo "make test      run the whole test suite against the real RabbitMQ, Redis and PostgreSQL"
	@echo "make test-cluster  only the tests on a local RabbitMQ cluster, Redis Cluster and Redis Sentinel (as root)"
	@echo "make lint      ruff, mypy --strict and the import contracts (lint-imports)"
	@echo "make docs      build the documentation site into site/ (mkdocs build --strict)"
	@echo "make docs-serve  serve the documentation on http://127.0.0.1:8000, rebuilt as you edit"
	@echo "make all       lint and test"
	@echo "make services  make sure RabbitMQ, Redis and PostgreSQL answer (start them when installed)"
	@echo "make bench     benchmarks against bare Dramatiq, Celery and raw pika (not part of make test)"
	@echo "make tools     make sure promtool, prometheus, amtool, chromium and pgbouncer are installed (Debian packages, as root)"
	@echo "make console-picture  redraw the console's picture in the docs (docs/console.png) in Chromium"

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/python -m actors.demo

services:
	scripts/ensure-services

tools:
	scripts/ensure-tools

test: install services tools
	$(BIN)/pytest

# The cluster tests start their own nodes (tests/cluster/conftest.py): no shared service needed.
test-cluster: install
	$(BIN)/pytest -m cluster tests/cluster

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Strict: a broken link, a missing snippet or reference, or a setting without a docstring fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

all: lint test

bench: install services
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench

# The docs' picture of the console: the browser test that sets up its run takes it; it is kept here.
console-picture: install services tools
	$(BIN)/pytest -q tests/console/test_browser.py::test_a_chord_under_way_as_the_readme_pictures_it \
		tests/console/test_browser.py::test_a_dead_letter_replayed_from_the_page_lets_its_run_succeed \
		tests/console/test_browser.py::test_plain_messages_are_counted_on_the_queues_page_which_leads_to_their_dead_letters \
		tests/console/test_browser.py::test_an_ended_run_is_re_run_from_its_page_which_opens_the_new_run
	cp test-artifacts/console/readme-console.png docs/console.png
	cp test-artifacts/console/test_a_dead_letter_replayed_from_the_page_lets_its_run_succeed-history-and-logs.png docs/console-step.png
	cp test-artifacts/console/test_plain_messages_are_counted_on_the_queues_page_which_leads_to_their_dead_letters-queues-last-hour.png docs/console-queues.png
	cp test-artifacts/console/test_an_ended_run_is_re_run_from_its_page_which_opens_the_new_run-re-run.png docs/console-rerun.png

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache site
