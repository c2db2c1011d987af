"""Which runs of the suite a slow test belongs in.

``make test`` runs the suite on PostgreSQL and MariaDB under the main Django, and on
SQLite in two halves: under the main Django the tests of real processes and the browser
(``-m "processes or browser"``), under Django 6 everything else (the Makefile says so).
Rate limits kept in a cache (Redis) touch no database: their timing tests run in the
PostgreSQL run only. ``SLOW_TESTS_ON_EVERY_RUN=1`` runs them everywhere.
"""

from __future__ import annotations

import os

import pytest

EVERYWHERE = bool(os.environ.get("SLOW_TESTS_ON_EVERY_RUN"))


def skip_cache_store_off_postgresql(store: str) -> None:
    """Called by a timing test of rate limits with its store (``database``, ``cache``)."""
    from django.db import connection

    if store == "cache" and connection.vendor != "postgresql" and not EVERYWHERE:
        pytest.skip(
            "rate limits kept in the cache touch no database: their timing is tested in the "
            "PostgreSQL run (SLOW_TESTS_ON_EVERY_RUN=1 runs it here too)"
        )
