"""The standalone project's settings (``config.settings``) read the environment; a value
that does not parse stops the process with an error naming the variable and why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.processes import KNOBS, REPO

READ = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DATABASES['default'].get('OPTIONS', {}).get('prepare_threshold'), "
    "settings.Q_CLUSTER['workers'])"
)
# Processes of their own: settings are read once per process. Nothing here reads a clock.
pytestmark = pytest.mark.processes

POSTGRES = "postgres://postgres@127.0.0.1:5432/reminders"


def settings_with(**variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DATABASE_URL=POSTGRES, **variables)
    return subprocess.run(
        [sys.executable, "-c", READ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PREPARE_THRESHOLD", "abc"),
        ("CONN_MAX_AGE", "ten minutes"),
        ("Q_WORKERS", "two"),
        ("REMINDERS_LEASE_SECONDS", "5m"),
        ("WECOM_RATE_LIMIT", "fast"),
    ],
)
def test_a_value_that_does_not_parse_names_its_variable(variable, value):
    done = settings_with(**{variable: value})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"django.core.exceptions.ImproperlyConfigured: environment variable {variable}: "
    ), last
    assert repr(value) in last


def test_prepare_threshold__its_default_a_number_and_empty_for_none():
    assert settings_with().stdout.split() == ["5", "2"]
    assert settings_with(PREPARE_THRESHOLD="3", Q_WORKERS="4").stdout.split() == ["3", "4"]
    assert settings_with(PREPARE_THRESHOLD="").stdout.split() == ["None", "2"]
