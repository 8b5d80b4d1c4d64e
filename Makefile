# ZeroLock: `make run` to serve, `make test` to run every test.
VENV   := .venv
PY     := $(VENV)/bin/python
PORT   ?= 8000
export PORT
# Extras `make test` installs. CI adds the Layer 0 adapters (.ci/run), whose tests
# skip locally without them: `make test TEST_EXTRAS=test,crewai,temporal` runs them.
TEST_EXTRAS ?= test

.PHONY: run test lint format bench bench-peer clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[$(TEST_EXTRAS)]"
	@# Browser tests drive Debian's Chromium (Playwright cannot download browsers here).
	command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }
	touch $@

run: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py bootstrap
	exec bin/serve

test: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) -m pytest

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed-test
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(VENV)/.installed-test
	$(PY) bench/run.py

# ZeroLock beside etcd (bench/peer.py; installs Debian's etcd-server if missing).
# e.g. make bench-peer PEER_ARGS="--db sqlite,postgres --seconds 30"
PEER_ARGS ?=
bench-peer: $(VENV)/.installed
	$(PY) bench/peer.py $(PEER_ARGS)

clean:
	rm -rf $(VENV) var *.egg-info
