"""Which runs of the suite a slow test belongs in.

``make test`` runs the suite on SQLite, PostgreSQL and MariaDB under Django 5.2, then on
SQLite again under Django 6. A slow test of processes and timing (a kill loop, pacing
against a sandbox) proves what it proves on each database; the Django 6 run is SQLite
once more, so it leaves such tests out, saying so, to keep CI short. Set
``SLOW_TESTS_ON_EVERY_RUN=1`` to run them there too.
"""

from __future__ import annotations

import os

import django
import pytest


def not_in_the_django6_run(what: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        django.VERSION >= (6, 0) and not os.environ.get("SLOW_TESTS_ON_EVERY_RUN"),
        reason=f"{what} runs on every database under Django 5.2; the Django 6 run (SQLite "
        "again) leaves it out to keep CI short (SLOW_TESTS_ON_EVERY_RUN=1 runs it)",
    )
