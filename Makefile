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
# Django 6 needs Python 3.12 or newer: the first one found runs the suite under it.
PYTHON_DJANGO6 ?= $(shell for p in python3.13 python3.12 $$HOME/.pyenv/versions/3.1[23]*/bin/python3; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV6 := .venv-django6

.PHONY: run sandbox test lint dist docs typecheck migrations-check test-sqlite test-postgres test-mariadb test-django6 bench soak clean \
	ci-sqlite ci-postgres-processes ci-mariadb-processes ci-lint ci-dist ci-docs ci-typecheck \
	ci-migrations-check ci-postgres-rest ci-mariadb-rest ci-django6

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

# The local WeCom sandbox alone, for a CRM in development (docs/how-to/add-to-crm.md): its
# development credentials, and a click on a card posted to CALLBACK_URL, a CRM's
# runserver. Ctrl-C stops it.
SANDBOX_PORT ?= 8900
CALLBACK_URL ?= http://127.0.0.1:8000/reminders/wecom/callback
sandbox: $(RUN_STAMP)
	@$(PY) manage.py wecom_sandbox --port $(SANDBOX_PORT) --callback-url $(CALLBACK_URL)

# `make test` is every step below in two lanes at once, each lane one step after another
# (ci-*): the tests of real processes mostly wait (for processes, a sandbox, a database
# that was stopped), and the machine has two cores.
# - The real clock's lane, at normal priority: the tests that start processes or a
#   browser, whose timing matters: SQLite's run, then PostgreSQL's and MariaDB's.
# - The other lane, under $(NICE) so that it never takes a core they want: lint, dist
#   (before PostgreSQL's part of the first lane, whose throwaway CRM installs the wheel),
#   docs, typecheck, migrations-check, then the rest of the suite on PostgreSQL (real
#   clock), on MariaDB (year-end clock) and under Django 6 on SQLite (Saturday clock).
# Nothing is left out: every test runs on the same databases, on the same clocks, as
# when each step ran alone. Each step's output is printed whole when it ends.
# `make test TEST_JOBS=1` runs the steps one at a time (the first lane, then the other).
TEST_JOBS ?= 2
NICE ?= nice -n 10

test: $(STAMP)
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target ci-mariadb-processes ci-django6

ci-sqlite:
	@$(MAKE) --no-print-directory test-sqlite
ci-postgres-processes: ci-sqlite ci-dist
	@$(MAKE) --no-print-directory test-postgres PART=processes
ci-mariadb-processes: ci-postgres-processes
	@$(MAKE) --no-print-directory test-mariadb PART=processes

ci-lint:
	@$(NICE) $(MAKE) --no-print-directory lint
ci-dist: ci-lint
	@$(NICE) $(MAKE) --no-print-directory dist
ci-docs: ci-dist
	@$(NICE) $(MAKE) --no-print-directory docs
ci-typecheck: ci-docs
	@$(NICE) $(MAKE) --no-print-directory typecheck
ci-migrations-check: ci-typecheck
	@$(NICE) $(MAKE) --no-print-directory migrations-check
ci-postgres-rest: ci-migrations-check
	@$(NICE) $(MAKE) --no-print-directory test-postgres PART=rest
ci-mariadb-rest: ci-postgres-rest
	@$(NICE) $(MAKE) --no-print-directory test-mariadb PART=rest
ci-django6: ci-mariadb-rest
	@$(NICE) $(MAKE) --no-print-directory test-django6

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The release a CRM pins: the sdist, and the wheel built from it, into an empty dist/
# (no build/ or egg-info of an earlier build to leak from), then twine's check of their
# metadata and bin/check-dist's of their contents against the checkout. The PostgreSQL
# run's throwaway CRM (tests/integration/test_crm_project.py) installs this wheel.
dist: $(STAMP)
	rm -rf dist build django_wecom_reminders.egg-info
	@# setuptools says a great deal: its output is shown only if the build fails.
	@$(PY) -m build --outdir dist . > $(VENV)/dist-build.log 2>&1 || { cat $(VENV)/dist-build.log; exit 1; }
	@echo "built: $$(cd dist && echo *)"
	$(VENV)/bin/twine check --strict dist/*
	$(PY) bin/check-dist dist

# The documentation site (docs/), Markdown through Sphinx and MyST: warnings are errors
# and references nitpicky, so a link to a missing page or heading fails the build.
# tests/test_docs.py runs its examples.
# It needs Sphinx and MyST alone (docs/requirements.txt, in .venv-docs): none of the
# system packages or tools the tests need. The reference pages' generated parts are in
# the pages (bin/reference), checked against the code by the suite.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed-$(shell cat docs/requirements.txt | cksum | cut -d' ' -f1)
$(DOCS_STAMP): docs/requirements.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet -r docs/requirements.txt
	rm -f $(DOCS_VENV)/.installed-*
	touch $@
docs: $(DOCS_STAMP)
	$(DOCS_VENV)/bin/sphinx-build -q -W --keep-going -n -b html docs docs/_build/html

typecheck: $(STAMP)
	$(VENV)/bin/mypy reminders ops config wecom_sandbox bin/check-dist
	$(VENV)/bin/mypy bin/reference docs/_ext/reference.py

migrations-check: $(STAMP)
	DATABASE_URL=sqlite:///:memory: $(PY) manage.py makemigrations --check --dry-run

# SQLite runs twice, each time with half the suite: under the main Django the tests of
# real processes and the browser, under Django 6 (test-django6) everything else. The
# servers' runs take the whole suite. SQLITE_ALL=1 runs it all here.
SQLITE_SHARE = $(if $(SQLITE_ALL),,-m "processes or browser")
REAL_CLOCK = -m "processes or browser"
MOVED_CLOCK = -m "not processes and not browser"
DJANGO6_SHARE = $(if $(SQLITE_ALL),,$(MOVED_CLOCK))

# Moved clocks (tests/support/clock.py): a test reads no wall clock unless it passes at
# any moment. Two runs go under Python's clock moved and ticking, every test but those
# of real processes and the browser (which keep the real clock: processes cannot share
# a moved one):
# - Django 6 on SQLite at Saturday 2027-01-09 15:30 Beijing: a rest day, after every
#   send_by, in a year no holiday package covers;
# - MariaDB at 2026-12-31 23:59:30 Beijing: the day and the year end during the run.
# PostgreSQL runs the whole suite on the real clock. `make test SATURDAY_CLOCK= YEAR_END_CLOCK=`
# runs everything on the real clock.
SATURDAY_CLOCK ?= 2027-01-09T15:30:00+08:00
YEAR_END_CLOCK ?= 2026-12-31T23:59:30+08:00

test-sqlite: $(STAMP)
	DATABASE_URL=sqlite:///$(CURDIR)/db.sqlite3 $(PY) -m pytest $(SQLITE_SHARE) $(PYTEST_ARGS)

# The same suite on each server. In CI an unreachable server fails the build; elsewhere
# it is said loudly and skipped.
test-postgres: $(STAMP)
	@$(MAKE) --no-print-directory test-server NAME=PostgreSQL URL=$(PG_URL) PART=$(PART)

test-mariadb: $(STAMP)
	@$(MAKE) --no-print-directory test-server NAME=MariaDB URL=$(MARIADB_URL) \
		CLOCK=$(YEAR_END_CLOCK) PART=$(PART)

# A server's run in parts: PART=processes is the tests of processes and the browser, on
# the real clock; PART=rest every other test, under Python's clock moved to CLOCK if set,
# in a test database of its own (suffix _rest) so that both parts may run at once, as
# `make test` runs them. Without PART: with CLOCK both parts, one after the other;
# without, the whole suite in one run.
SERVER_PROCESSES = echo "== the suite on $(NAME) ($(URL)): processes and the browser, real clock" && \
	DATABASE_URL=$(URL) $(PY) -m pytest $(REAL_CLOCK) $(PYTEST_ARGS)
SERVER_REST = echo "== the suite on $(NAME) ($(URL)): the rest, $(if $(CLOCK),clock moved to $(CLOCK),real clock)" && \
	TEST_CLOCK=$(CLOCK) TEST_DB_SUFFIX=$${TEST_DB_SUFFIX:-}_rest DATABASE_URL=$(URL) \
	$(PY) -m pytest $(MOVED_CLOCK) $(PYTEST_ARGS)
SERVER_ALL = echo "== the suite on $(NAME) ($(URL))" && DATABASE_URL=$(URL) $(PY) -m pytest $(PYTEST_ARGS)
SERVER_RUN = $(if $(filter processes,$(PART)),$(SERVER_PROCESSES),$(if $(filter rest,$(PART)),$(SERVER_REST),$(if $(CLOCK),$(SERVER_PROCESSES) && $(SERVER_REST),$(SERVER_ALL))))

test-server:
	@if $(PY) bin/db-reachable "$(URL)"; then \
		$(SERVER_RUN); \
	elif [ "$$CI" = "true" ]; then \
		echo "$(NAME) at $(URL) is unreachable: failing (CI=true)"; exit 1; \
	else \
		echo "$(NAME) at $(URL) is unreachable: its tests did NOT run"; \
	fi

# The suite on SQLite once more, under the newest Django 6.0 release (its share: above).
$(VENV6)/.installed-$(HASH): pyproject.toml
	@test -n "$(PYTHON_DJANGO6)" || { echo "no Python 3.12+ found for Django 6 (set PYTHON_DJANGO6)"; exit 1; }
	bash bin/system-deps
	test -x $(VENV6)/bin/python || $(PYTHON_DJANGO6) -m venv $(VENV6)
	$(VENV6)/bin/python -m pip install --quiet --upgrade pip
	$(VENV6)/bin/python -m pip install --quiet -e '.[dev]' 'django>=6.0,<6.1'
	rm -f $(VENV6)/.installed-*
	touch $@

test-django6:
	@if [ -z "$(PYTHON_DJANGO6)" ] && [ "$$CI" != "true" ]; then \
		echo "no Python 3.12+ found: the suite did NOT run under Django 6"; \
	else \
		$(MAKE) --no-print-directory $(VENV6)/.installed-$(HASH) && \
		echo "== the suite under Django 6 ($$($(VENV6)/bin/python -m django --version), $$($(VENV6)/bin/python --version)), clock moved to $(SATURDAY_CLOCK)" && \
		TEST_CLOCK=$(if $(SQLITE_ALL),,$(SATURDAY_CLOCK)) DATABASE_URL=sqlite:///$(CURDIR)/db.sqlite3 TEST_DB_SUFFIX=_django6 $(VENV6)/bin/python -m pytest $(DJANGO6_SHARE) $(PYTEST_ARGS); \
	fi

bench: $(STAMP)
	@$(PY) bin/db-reachable "$(PG_URL)" || { echo "benchmarks need PostgreSQL at $(PG_URL)"; exit 1; }
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/throughput.py
	@if $(PY) bin/db-reachable "$(MARIADB_URL)"; then \
		echo "DATABASE_URL=$(MARIADB_URL) $(PY) benchmarks/throughput.py"; \
		DATABASE_URL=$(MARIADB_URL) $(PY) benchmarks/throughput.py; \
	else echo "MariaDB at $(MARIADB_URL) is unreachable: benchmarks/throughput.py did NOT run on it"; fi
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/statements.py
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/ratelimit.py
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/bulk.py
	DATABASE_URL=$(PG_URL) MARIADB_URL=$(MARIADB_URL) $(PY) benchmarks/history.py
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/memory.py
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/card_latency.py
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/digest_morning.py
	DATABASE_URL=$(PG_URL) $(PY) benchmarks/idle.py

# The model-based test of the whole pipeline (tests/reminders/test_model_based.py) for
# longer than `make test` gives it: MODEL_SOAK_EXAMPLES examples from a random seed. A
# failure prints its shortest sequence of steps, the blob that reproduces it and the
# seed (MODEL_SEED=n replays the soak). On PostgreSQL unless SOAK_URL says otherwise.
MODEL_SOAK_EXAMPLES ?= 300
SOAK_URL ?= $(PG_URL)

soak: $(STAMP)
	MODEL_SOAK_EXAMPLES=$(MODEL_SOAK_EXAMPLES) DATABASE_URL=$(SOAK_URL) $(PY) -m pytest \
		tests/reminders/test_model_based.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VENV6) $(DOCS_VENV) .test-db*.sqlite3* .mypy_cache .ruff_cache .pytest_cache dist build django_wecom_reminders.egg-info
