"""Settings for the test suite and for the processes the tests start."""

import os

from config.settings import *  # noqa: F403
from config.settings import BASE_DIR, DATABASES

_suffix = os.environ.get("TEST_DB_SUFFIX", "")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / f".test-db{_suffix}.sqlite3")}
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_reminders{_suffix}"}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

REMINDERS_DEFAULT_CHANNEL = "memory"
REMINDERS_CHANNELS = {
    "memory": {"BACKEND": "reminders.senders.memory.MemorySender"},
    "console": {"BACKEND": "reminders.senders.console.ConsoleSender"},
    # Append every delivery to the file named by $RECORD_FILE, across processes.
    "recording": {"BACKEND": "tests.support.senders.RecordingSender"},
    # The same, but like a provider with duplicate check: an identical body with the
    # same key inside the window is not delivered again.
    "recording_dedup": {
        "BACKEND": "tests.support.senders.RecordingSender",
        "OPTIONS": {"duplicate_check": True},
    },
}

# Knobs for the run_reminders processes that tests/integration starts; unset, the
# project's defaults hold (config/settings.py itself reads the lease and the tick).
if "REMINDERS_SHUTDOWN_GRACE" in os.environ:
    REMINDERS_SHUTDOWN_GRACE = float(os.environ["REMINDERS_SHUTDOWN_GRACE"])
if "REMINDERS_RUNS_PER_JOB" in os.environ:
    REMINDERS_RUNS_PER_JOB = int(os.environ["REMINDERS_RUNS_PER_JOB"])
if "REMINDERS_MAX_IN_FLIGHT" in os.environ:
    REMINDERS_MAX_IN_FLIGHT = int(os.environ["REMINDERS_MAX_IN_FLIGHT"])
if "REMINDERS_CLAIM_BATCH" in os.environ:
    REMINDERS_CLAIM_BATCH = int(os.environ["REMINDERS_CLAIM_BATCH"])

# The run_reminders processes of tests/integration/test_rate_limits.py send to a WeCom
# sandbox: they get its URL and credentials (and WECOM_RATE_LIMIT) in their environment,
# which config/settings.py reads; the channel itself must be declared here because the
# channels above replace the project's.
if os.environ.get("WECOM_CORP_ID"):
    REMINDERS_CHANNELS["wecom"] = {"BACKEND": "reminders.senders.wecom.WeComSender"}
