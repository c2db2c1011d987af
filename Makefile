# The two commands that matter: `make run` and `make test`. Each installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PG_URL ?= postgres://postgres@127.0.0.1:5432/reminders
PYTEST_ARGS ?=

.PHONY: run test lint typecheck migrations-check test-sqlite test-postgres bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	bash bin/run-dev

test: lint typecheck migrations-check test-sqlite test-postgres

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy reminders ops config

migrations-check: $(STAMP)
	DATABASE_URL=sqlite:///:memory: $(PY) manage.py makemigrations --check --dry-run

test-sqlite: $(STAMP)
	DATABASE_URL=sqlite:///$(CURDIR)/db.sqlite3 $(PY) -m pytest $(PYTEST_ARGS)

# In CI an unreachable PostgreSQL fails the build; elsewhere it is said and skipped.
test-postgres: $(STAMP)
	@if $(PY) bin/db-reachable "$(PG_URL)"; then \
		DATABASE_URL=$(PG_URL) $(PY) -m pytest $(PYTEST_ARGS); \
	elif [ "$$CI" = "true" ]; then \
		echo "PostgreSQL at $(PG_URL) is unreachable: failing (CI=true)"; exit 1; \
	else \
		echo "PostgreSQL at $(PG_URL) is unreachable: its tests did NOT run"; \
	fi

bench: $(STAMP)
	@$(PY) bin/db-reachable "$(PG_URL)" || { echo "benchmarks need PostgreSQL at $(PG_URL)"; exit 1; }
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) .test-db*.sqlite3* .mypy_cache .ruff_cache .pytest_cache
