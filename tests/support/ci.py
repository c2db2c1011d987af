"""Which runs of the suite a slow test belongs in.

``make test`` runs the suite on SQLite, PostgreSQL and MariaDB under Django 5.2, then on
SQLite again under Django 6. A test of real processes (``processes``: kills, pacing,
restarts) proves what it proves on each database, and the Django 6 run is SQLite once
more: it leaves those out, and the few other slow ones marked here, saying so in the
skip reason, to keep CI short. Rate limits kept in a cache (Redis) touch no database:
their timing tests run in the PostgreSQL run only. ``SLOW_TESTS_ON_EVERY_RUN=1`` runs
all of them everywhere.
"""

from __future__ import annotations

import os

import django
import pytest

EVERYWHERE = bool(os.environ.get("SLOW_TESTS_ON_EVERY_RUN"))
SKIPPED = django.VERSION >= (6, 0) and not EVERYWHERE
REASON = (
    "{what} runs on every database under Django 5.2; the Django 6 run (SQLite again) "
    "leaves it out to keep CI short (SLOW_TESTS_ON_EVERY_RUN=1 runs it)"
)


def not_in_the_django6_run(what: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(SKIPPED, reason=REASON.format(what=what))


def skip_processes_in_the_django6_run(items: list[pytest.Item]) -> None:
    """The collection hook's part: every ``processes`` test, in the Django 6 run."""
    if not SKIPPED:
        return
    mark = pytest.mark.skip(reason=REASON.format(what="a test of real processes"))
    for item in items:
        if item.get_closest_marker("processes"):
            item.add_marker(mark)


def skip_cache_store_off_postgresql(store: str) -> None:
    """Called by a timing test of rate limits with its store (``database``, ``cache``)."""
    from django.db import connection

    if store == "cache" and connection.vendor != "postgresql" and not EVERYWHERE:
        pytest.skip(
            "rate limits kept in the cache touch no database: their timing is tested in the "
            "PostgreSQL run (SLOW_TESTS_ON_EVERY_RUN=1 runs it here too)"
        )
