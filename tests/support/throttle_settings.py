"""The test settings with follow-ups throttled to three an hour per recipient, for the
``run_reminders`` processes of tests/integration/test_throttles.py (which set
``DJANGO_SETTINGS_MODULE`` to this module) and for the test itself (``settings``)."""

from tests.settings import *  # noqa: F403

REMINDERS_KINDS = {"follow_up": {"throttle_per_hour": 3, "max_lateness_seconds": 24 * 3600}}
