"""Settings for the processes ``benchmarks/throughput.py`` starts.

The project's own settings, with one instant channel and the engine's tuning knobs
read from the environment so that one run can sweep them (read here even where
``config.settings`` reads them too, so that the sweep never silently stops applying).
``Q_CLUSTER`` is inherited unchanged: the bare django-q2 baseline runs under the same
cluster settings as the engine.
"""

import environ

from config.settings import *  # noqa: F403

env = environ.Env()

DEBUG = False  # with DEBUG every query is kept in memory: a leak, and slower
REMINDERS_DEFAULT_CHANNEL = "bench"
REMINDERS_CHANNELS = {
    "bench": {"BACKEND": "benchmarks.senders.CountingSender"},
    # The same, as a provider that drops repeated bodies: sent in batches.
    "bench_dedup": {
        "BACKEND": "benchmarks.senders.CountingSender",
        "OPTIONS": {"duplicate_check": True},
    },
}
REMINDERS_RUNS_PER_JOB = env.int("REMINDERS_RUNS_PER_JOB", default=20)
REMINDERS_CLAIM_BATCH = env.int("REMINDERS_CLAIM_BATCH", default=500)
REMINDERS_MAX_IN_FLIGHT = env.int("REMINDERS_MAX_IN_FLIGHT", default=1000)
