"""Settings for the processes ``benchmarks/ratelimit.py`` starts: one ``wecom`` channel.

Its URL, credentials and ``WECOM_RATE_LIMIT`` come from the environment, read by
``config.settings`` (the benchmark points them at a sandbox process); the engine's
knobs are read as in ``benchmarks.settings``.
"""

from benchmarks.settings import *  # noqa: F403

REMINDERS_DEFAULT_CHANNEL = "wecom"
REMINDERS_CHANNELS = {"wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"}}
