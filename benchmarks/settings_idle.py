"""Settings for the processes ``benchmarks/idle.py`` starts: ``benchmarks.settings`` (the
counting channel, nothing ever sent to a provider) with every statement Django sends
counted by role (``benchmarks.dbcount``)."""

from benchmarks.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks.dbcount.CountingConfig"]  # noqa: F405
