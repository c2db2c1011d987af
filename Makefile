# The two commands that matter: `make run` and `make test`. Each installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HASH := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-dev-$(HASH)
RUN_STAMP := $(VENV)/.installed-run-$(HASH)
PG_URL ?= postgres://postgres@127.0.0.1:5432/reminders
MARIADB_URL ?= mysql://root@127.0.0.1:3306/reminders
PYTEST_ARGS ?=

.PHONY: run test lint typecheck migrations-check test-sqlite test-postgres test-mariadb bench clean

# Running needs the package alone; testing adds the tools and every database driver
# (mysqlclient builds against MariaDB's client library, which bin/system-deps installs).
$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	rm -f $(VENV)/.installed-run-*
	touch $@

$(STAMP): $(RUN_STAMP)
	bash bin/system-deps
	$(PY) -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-dev-*
	touch $@

run: $(RUN_STAMP)
	bash bin/run-dev

test: lint typecheck migrations-check test-sqlite test-postgres test-mariadb

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy reminders ops config

migrations-check: $(STAMP)
	DATABASE_URL=sqlite:///:memory: $(PY) manage.py makemigrations --check --dry-run

test-sqlite: $(STAMP)
	DATABASE_URL=sqlite:///$(CURDIR)/db.sqlite3 $(PY) -m pytest $(PYTEST_ARGS)

# The same suite on each server. In CI an unreachable server fails the build; elsewhere
# it is said loudly and skipped.
test-postgres: $(STAMP)
	@$(MAKE) --no-print-directory test-server NAME=PostgreSQL URL=$(PG_URL)

test-mariadb: $(STAMP)
	@$(MAKE) --no-print-directory test-server NAME=MariaDB URL=$(MARIADB_URL)

test-server:
	@if $(PY) bin/db-reachable "$(URL)"; then \
		echo "== the suite on $(NAME) ($(URL))"; \
		DATABASE_URL=$(URL) $(PY) -m pytest $(PYTEST_ARGS); \
	elif [ "$$CI" = "true" ]; then \
		echo "$(NAME) at $(URL) is unreachable: failing (CI=true)"; exit 1; \
	else \
		echo "$(NAME) at $(URL) is unreachable: its tests did NOT run"; \
	fi

bench: $(STAMP)
	@$(PY) bin/db-reachable "$(PG_URL)" || { echo "benchmarks need PostgreSQL at $(PG_URL)"; exit 1; }
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) .test-db*.sqlite3* .mypy_cache .ruff_cache .pytest_cache
