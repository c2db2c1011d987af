"""Loading the app registers what the engine needs: in a CRM that imports nothing of
``reminders`` itself, the system checks (the worker's tag too) and the senders' settings
hook must exist once ``django.setup()`` has run. A fresh interpreter, so nothing a test
imported registers them instead."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.processes import REPO

PROBE = """
import django
django.setup()
from django.core.checks import registry
tags = registry.registry.tags_available(deployment_checks=True)
print(sorted(tags))
import sys

import pytest
print("reminders.checks" in sys.modules, "reminders.senders" in sys.modules)
"""


@pytest.mark.processes
def test_setup_alone_registers_the_checks_and_the_senders():
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    tags, modules = result.stdout.splitlines()[-2:]
    assert "'reminders_worker'" in tags
    assert modules == "True True"
