"""The test settings with a follow-up builder that hangs for some recipients
(``tests.support.hanging_builder``), and runs given up after two lost jobs."""

from tests.settings import *  # noqa: F403

REMINDERS_BUILDERS = {"follow_up": "tests.support.hanging_builder.build"}
REMINDERS_MAX_JOB_FAILURES = 2
