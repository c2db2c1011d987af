"""The test settings with follow-ups folded into digests of a short window, for the
``run_reminders`` processes of tests/integration/test_digest_kill_loop.py (which set
``DJANGO_SETTINGS_MODULE`` to this module) and for the test itself (``settings``)."""

from tests.settings import *  # noqa: F403

REMINDERS_KINDS = {"follow_up": {"digest_seconds": 15}}
