# Two entry points for a new machine: `make demo` and `make test`.
# Each installs what it needs into .venv first (re-run when pyproject.toml changes).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: demo test lint audit install install-dev pg-up browser clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	$(PYTHON) -m venv $(VENV)

# The web app, the CLI and the worker (CPU torch: the wheel pinned first, so the
# worker extra's range is already satisfied and no CUDA build is downloaded).
$(VENV)/.installed-worker: pyproject.toml | $(BIN)/python
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[worker]'
	touch $@

# Everything the tests need.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[dev,worker]'
	touch $@ $(VENV)/.installed-worker

install: $(VENV)/.installed-worker
install-dev: $(VENV)/.installed-dev

# Builds (once) the demo model, precomputes the demo study, builds HITs, lets a simulated
# crowd (labelled as such in the results) do most of them through the real pages, and serves.
# Without apt-get (the Austen corpus is a Debian package): $(BIN)/ebc demo --corpus FILE.
demo: install
	$(BIN)/ebc demo --simulated-crowd

# PostgreSQL must be up for the suite (CI starts it when it is down).
pg-up:
	@pg_isready -q -h 127.0.0.1 -p 5432 || \
	  pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && exit 0; sleep 1; done; \
	  echo "PostgreSQL did not start on 127.0.0.1:5432" >&2; exit 1

# Browser tests drive Debian's Chromium through Playwright (no browser download).
browser:
	@command -v chromium >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# Debian's Compose (1.29): its `docker-compose config` needs no Docker engine.
compose-cli:
	@command -v docker-compose >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose; }

# What is shipped must run: the wheel built, installed (not editable) into a fresh venv,
# migrated and served; docker-compose.yml validated. See .ci/wheel-check.
.PHONY: compose-cli wheel-check
wheel-check: compose-cli
	PYTHON=$(PYTHON) .ci/wheel-check

lint: install-dev
	$(BIN)/ruff check .

# Known vulnerabilities of the installed packages (PyPI's advisory data; the editable
# project itself is not on PyPI). Fails on a vulnerability; a package whose release PyPI
# does not answer for is listed as skipped.
audit: install-dev
	.ci/audit

test: install-dev pg-up browser lint audit wheel-check
	$(BIN)/python -m pytest --db=all --durations=25 -n 2 --dist loadfile

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
