"""Which runs of the suite a slow test belongs in.

``make test`` runs the suite on SQLite, PostgreSQL and MariaDB under Django 5.2, then on
SQLite again under Django 6. A test of real processes (``processes``: kills, pacing,
restarts) proves what it proves on each database, and the Django 6 run is SQLite once
more: it leaves those out, and the few other slow ones marked here, saying so in the
skip reason, to keep CI short. ``SLOW_TESTS_ON_EVERY_RUN=1`` runs them there too.
"""

from __future__ import annotations

import os

import django
import pytest

SKIPPED = django.VERSION >= (6, 0) and not os.environ.get("SLOW_TESTS_ON_EVERY_RUN")
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
