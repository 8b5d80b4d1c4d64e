# ZeroLock: `make run` to serve, `make test` to run every test.
VENV   := .venv
PY     := $(VENV)/bin/python
PORT   ?= 8000
export PORT
# Every dependency of every extra at the version CI tested (`make lock` writes it).
# Installs take it as pip constraints: `make run` gets the runtime's share of it,
# `make test` the share its TEST_EXTRAS need, all at the same versions.
LOCK   := requirements-lock.txt
# `make lock` resolves with uv; LOCK_ARGS="--upgrade-package NAME" moves one pin.
UV     := uv>=0.13,<0.14
LOCK_ARGS ?=
# Extras `make test` installs. CI adds the Layer 0 adapters (.ci/run), whose tests
# skip locally without them: `make test TEST_EXTRAS=test,crewai,temporal` runs them.
TEST_EXTRAS ?= test
comma  := ,
# One stamp per extras set: a single stamp made every `make test` after the first
# skip the install, whatever TEST_EXTRAS asked for.
TEST_STAMP := $(VENV)/.installed-$(subst $(comma),-,$(strip $(TEST_EXTRAS)))
# `make test` never touches the var/ of `make run` (first-run.txt, secret key,
# broker): every step, mypy's Django plugin included, gets the test data dir, the
# one zerolock_site/settings.py gives pytest (TEST_DATA_DIR), unless the caller
# names one (.ci/run names one per configuration).
test: export ZEROLOCK_DATA_DIR ?= $(CURDIR)/var/test

.PHONY: run test lint format bench bench-peer lock clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)

$(VENV)/.installed: pyproject.toml $(LOCK) | $(VENV)/bin/python
	$(PY) -m pip install --quiet -c $(LOCK) -e .
	touch $@

$(TEST_STAMP): pyproject.toml $(LOCK) $(VENV)/.installed
	$(PY) -m pip install --quiet -c $(LOCK) -e ".[$(TEST_EXTRAS)]"
	@# Browser tests drive Debian's Chromium (Playwright cannot download browsers here).
	command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }
	touch $@

run: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py bootstrap
	exec bin/serve

test: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) -m pytest

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(TEST_STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(TEST_STAMP)
	$(PY) bench/run.py

# ZeroLock beside etcd (bench/peer.py; installs Debian's etcd-server if missing).
# e.g. make bench-peer PEER_ARGS="--db sqlite,postgres --seconds 30"
PEER_ARGS ?=
bench-peer: $(VENV)/.installed
	$(PY) bench/peer.py $(PEER_ARGS)

# After a change to the dependencies in pyproject.toml: re-resolve the lock (the
# pins it has are kept where they still fit), then commit both.
lock: | $(VENV)/bin/python
	$(PY) -m pip install --quiet "$(UV)"
	$(VENV)/bin/uv pip compile pyproject.toml --all-extras --universal --python-version 3.11 \
		--quiet --output-file $(LOCK) $(LOCK_ARGS)

clean:
	rm -rf $(VENV) var *.egg-info
