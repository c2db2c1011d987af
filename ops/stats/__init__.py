"""The numbers of the ops dashboard, its JSON and ``reminders_stats``, for one local day:
what they count, from which tables, and at what cost in queries.

**What is counted.** The runs (``TaskRun``, joined to their ``ScheduledTask`` for kind
and channel) *due* in a local day of ``settings.TIME_ZONE`` (23 or 25 hours across a DST
change), each counted once by its status now. So a day's figures add up: ``planned``
(every run due that day but the cancelled ones) = ``pending`` + ``sent`` + ``failed`` +
``expired`` + ``unknown`` + ``skipped``; the hours of a day add up to the day, and a
chart's day to the table's. ``due_at`` rather than ``finished_at``: a day is the plan it
was given and what became of it; a run due at 23:59 and sent at 00:01 is the earlier
day's. Besides, as of now: the plan ahead (waiting and leased runs), the scheduler
heartbeats (``SchedulerHeartbeat``) and django-q2's queue (``OrmQ``, and its clusters'
reports in its cache where that is shared).

**Cost.** A fixed number of aggregate queries, whatever the data (tested): three for
the counts (the day by hour, kind and channel; the 13 earlier days by day, without the
join to the tasks; the week's 6 earlier days by channel), each grouped by status too
with one ``COUNT(*)``; the percentiles (3 on PostgreSQL, 1 elsewhere); two for failures
(by status and code; the latest few); one for the plan and one for django-q2's queue
(conditional ``COUNT(…) FILTER``, through the engine's partial indexes of waiting and
leased runs); one for the heartbeats; one for the recalls of the last 24 hours
(``recalls``); seven for the wave ahead (``wave``: the next hour's minutes by kind,
three for the members nearest WeCom's limits; the waiting runs by kind with last week's
recurring runs; the ledger's messages sent today; the alerts sent today as the WeCom
app): 19 on PostgreSQL, 17 elsewhere. The
run queries read the runs due in their days through an index on ``TaskRun.due_at``
where there is one (without it, each reads the whole table); the figures with and
without are in the README.

**Where.** ``days`` (the local day, its hours, ISO instants), ``counts`` (``Counts``,
the success rate, the three count queries), ``spreads`` (percentiles), ``breakdowns``
(by hour, day, kind and channel), ``failures``, ``plan`` (the hour ahead), ``recalls``,
``wave`` (the next hour minute by minute, the members nearest WeCom's per-member
limits, the runs held by quiet hours, the daily quota), ``runners`` (schedulers and
workers), ``summary`` (``Stats`` and ``compute``); ``text`` writes the numbers as tables
for ``reminders_stats`` and ``format`` writes one number for people, for the page and
the command alike.

**Imports.** The package may import ``reminders``' models and services and the ``ops``
models, settings and health checks, never the dashboard's views or pages
(``ops.dashboard``, ``ops.dashboard_page``): they import it. ``reminders`` never imports
``ops``. Every name below is what callers import from ``ops.stats``.
"""

from __future__ import annotations

from .breakdowns import Bucket, ChannelRate, KindDay
from .counts import PENDING, Counts
from .days import (
    FIRST_YEAR,
    LAST_YEAR,
    day_bounds,
    hour_starts,
    local_iso,
    parse_day,
    today,
    zone_name,
)
from .failures import FAILURE_GROUPS, LATEST_FAILURES, PROBLEMS, FailedRun, FailureGroup
from .plan import PLAN_HORIZON, PriorityPlan
from .runners import ClusterStatus, Scheduler, Workers
from .spreads import QUANTILES, PercentileCont, Spread, percentile
from .summary import CHART_DAYS, RATE_DAYS, Stats, compute
from .wave import PER_HOUR, PER_MINUTE, PER_SEAT_DAILY, Member, Minute, QuietHeld, Quota, Wave

__all__ = [
    "CHART_DAYS",
    "FAILURE_GROUPS",
    "FIRST_YEAR",
    "LAST_YEAR",
    "LATEST_FAILURES",
    "PENDING",
    "PER_HOUR",
    "PER_MINUTE",
    "PER_SEAT_DAILY",
    "PLAN_HORIZON",
    "PROBLEMS",
    "QUANTILES",
    "RATE_DAYS",
    "Bucket",
    "ChannelRate",
    "ClusterStatus",
    "Counts",
    "FailedRun",
    "FailureGroup",
    "KindDay",
    "Member",
    "Minute",
    "PercentileCont",
    "PriorityPlan",
    "QuietHeld",
    "Quota",
    "Scheduler",
    "Spread",
    "Stats",
    "Wave",
    "Workers",
    "compute",
    "day_bounds",
    "hour_starts",
    "local_iso",
    "parse_day",
    "percentile",
    "today",
    "zone_name",
]
