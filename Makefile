# Every command runs through these targets; README and .ci/run call them too.
# The first Python 3.11+ on PATH (override: make PYTHON=/path/to/python3.x).
PYTHON ?= $(firstword $(foreach candidate,python3.11 python3.12 python3.13 python3.14 python3,$(shell command -v $(candidate) 2>/dev/null)))
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
NODE_STAMP := tests/clients/node_modules/.installed

.PHONY: help run test lint typecheck unit clients migrate demo bench format clean

help: ## Show the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" && $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
		|| { echo "need Python 3.11+ on PATH (or make PYTHON=/path/to/python3.x)"; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)

# The npm tools that check the OpenAPI document from a client's side (Spectral, openapi-typescript,
# tsc), pinned in tests/clients/package-lock.json.
$(NODE_STAMP): tests/clients/package.json tests/clients/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "need Node.js and npm (for tests/clients)"; exit 1; }
	npm ci --prefix tests/clients --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

run: $(STAMP) ## Install, migrate, create the demo workspace (first run) and serve on 127.0.0.1:8000
	$(BIN)/herald migrate
	$(BIN)/herald demo
	$(BIN)/herald serve --host 127.0.0.1 --port 8000

test: lint typecheck unit ## Lint, type check and run the whole test suite

lint: $(STAMP) ## ruff check + format check
	$(BIN)/ruff check src tests benchmarks migrations
	$(BIN)/ruff format --check src tests benchmarks migrations

typecheck: $(STAMP) ## mypy (strict)
	$(BIN)/mypy

unit: $(STAMP) $(NODE_STAMP) ## The test suite (SQLite; PostgreSQL/Redis when HERALD_TEST_* are set)
	$(BIN)/pytest -q

clients: $(STAMP) $(NODE_STAMP) ## Spectral, TypeScript types and a generated Python client against a served Herald
	$(BIN)/pytest -q tests/clients

migrate: $(STAMP) ## Upgrade the database to head
	$(BIN)/herald migrate

PRISM := benchmarks/peers/node_modules/.bin/prism

$(PRISM): benchmarks/peers/package-lock.json
	cd benchmarks/peers && npm ci --no-audit --no-fund
	touch $(PRISM)

bench: $(STAMP) $(PRISM) ## Print the benchmark tables (see benchmarks/README.md; needs wrk)
	$(BIN)/python -m benchmarks.run

format: $(STAMP) ## Apply ruff fixes and formatting
	$(BIN)/ruff check --fix src tests benchmarks migrations
	$(BIN)/ruff format src tests benchmarks migrations

clean: ## Remove the virtualenv and local databases
	rm -rf $(VENV) herald.db herald.db-wal herald.db-shm .herald build tests/clients/node_modules
