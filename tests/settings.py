"""Settings for the test suite and for the processes the tests start."""

import os

from config.settings import *  # noqa: F403
from config.settings import BASE_DIR, DATABASES

_suffix = os.environ.get("TEST_DB_SUFFIX", "")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / f".test-db{_suffix}.sqlite3")}
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_reminders{_suffix}"}

# The suite asserts English texts: the tests and the processes they start (which get
# these settings) use English whatever LANGUAGE_CODE the environment sets.
LANGUAGE_CODE = "en-us"

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

REMINDERS_DEFAULT_CHANNEL = "memory"
# Ops' default alert channel (the standalone settings leave it out without ADMINS): mail
# to ADMINS, which the tests that need them set.
OPS_ALERT_CHANNELS = {"admins": {"BACKEND": "ops.alert_channels.MailAdmins"}}
# The suite runs on the real clock, which may be within 60 days of the end of the
# calendar package's coverage: no calendar warning unless a test asks for it.
REMINDERS_CALENDAR_WARN_DAYS = 0
REMINDERS_CHANNELS = {
    "memory": {"BACKEND": "reminders.senders.memory.MemorySender"},
    # Drops a key and body it already holds, as WeCom's duplicate check does: the engine
    # sends to such channels in batches.
    "memory_dedup": {
        "BACKEND": "reminders.senders.memory.MemorySender",
        "OPTIONS": {"duplicate_check": True},
    },
    # The same, paced: 20 a second (3% under, as every channel), bursts of 3.
    "paced_dedup": {
        "BACKEND": "reminders.senders.memory.MemorySender",
        "OPTIONS": {"duplicate_check": True, "rate_limit": 20, "rate_burst": 3},
    },
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

# The run_reminders processes of tests/integration/test_rate_limits.py send to a WeCom
# sandbox: they get its URL and credentials (and WECOM_RATE_LIMIT) in their environment,
# which config/settings.py reads; the channel itself must be declared here because the
# channels above replace the project's.
if os.environ.get("WECOM_CORP_ID"):
    REMINDERS_CHANNELS["wecom"] = {"BACKEND": "reminders.senders.wecom.WeComSender"}


def rate_cache(prefix: str) -> dict[str, str]:
    """A Redis cache for rate limits; ``prefix`` keeps one test's buckets apart."""
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "KEY_PREFIX": prefix,
    }


# Processes of the tests that keep rate limits in Redis are told so in their environment.
if os.environ.get("TEST_RATE_CACHE_PREFIX"):
    CACHES = {**CACHES, "rate": rate_cache(os.environ["TEST_RATE_CACHE_PREFIX"])}  # noqa: F405
    REMINDERS_RATE_LIMIT_CACHE = "rate"

# A stand-in CRM: objects tasks are about, and where users' member ids are kept.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.crm"]  # noqa: F405
