"""Settings for the processes ``benchmarks/digest_morning.py`` starts: the ``wecom``
channel of ``benchmarks.settings_wecom``, the statements counted (``benchmarks.dbcount``),
and the morning's kinds from the environment:

* ``BENCH_DIGEST_SECONDS``: the follow-ups' digest window (0: none, each its own message);
* ``BENCH_STAGGER_SCALE``: the daily report's stagger times this (1: its own, unchanged);
  a morning scaled down to a shorter window scales the stagger with it.

The daily report's working-day calendar is off, so that the morning is the same whatever
day the benchmark runs on; its stagger, priority and other rules are its kind's.
"""

import environ

from benchmarks.settings_wecom import *  # noqa: F403

env = environ.Env()

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks.dbcount.CountingConfig"]  # noqa: F405

_scale = env.float("BENCH_STAGGER_SCALE", default=1.0)
# The daily report's own stagger (reminders/kinds.py): 300 s of jitter, 10 batches 60 s apart.
_JITTER, _INTERVAL = 300, 60
REMINDERS_KINDS: dict[str, dict[str, object]] = {
    "follow_up": {"digest_seconds": env.int("BENCH_DIGEST_SECONDS", default=0)},
    "daily_report": {"calendar": ""},
}
if _scale != 1.0:
    REMINDERS_KINDS["daily_report"].update(
        jitter_seconds=round(_JITTER * _scale),
        batch_interval_seconds=round(_INTERVAL * _scale),
    )
