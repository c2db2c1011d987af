"""``Stats``, every number of one local day as the dashboard, its JSON and
``reminders_stats`` show them, and ``compute``, which runs the queries and assembles it.

The day's runs are the runs *due* in it; the charts go back ``CHART_DAYS`` days, ending
with the day, and a channel's rate covers the ``RATE_DAYS`` days ending with it. The
plan, the schedulers, the workers, the recalls and the wave ahead are as of ``now``,
whatever the day.
Invariants: the queries run in a fixed order and number (see ``ops.stats``); ``as_dict``
is the JSON of the view and of ``reminders_stats --json``, its keys stable.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from reminders.models import TaskRun

from ..conf import settings as conf
from .breakdowns import (
    Bucket,
    ChannelRate,
    DayGroups,
    KindDay,
    channels,
    day_buckets,
    hour_buckets,
    kinds,
)
from .counts import Counts, by_channel, by_day, by_hour_kind_channel
from .days import day_bounds, hour_starts, local_iso, today, zone_name
from .failures import FailedRun, FailureGroup, failure_groups, latest_failures
from .plan import PLAN_HORIZON, PriorityPlan, plan
from .recalls import recalled
from .runners import Scheduler, Workers, schedulers, workers
from .spreads import Spread, spread_dict, spreads_in_python, spreads_in_sql
from .wave import Wave, wave

CHART_DAYS = 14
RATE_DAYS = 7


@dataclass(frozen=True)
class Stats:
    day: date
    time_zone: str
    now: datetime
    start: datetime
    end: datetime
    totals: Counts
    duration: Spread
    lateness: Spread
    kinds: list[KindDay]
    channels: list[ChannelRate]
    hours: list[Bucket]
    days: list[Bucket]
    failures: list[FailureGroup]
    latest_failures: list[FailedRun]
    plan: list[PriorityPlan]
    schedulers: list[Scheduler]
    workers: Workers
    heartbeat_max_age: float
    # Messages recalled in the 24 hours up to ``now``, whatever the day.
    recalled: int = 0
    # The wave ahead, as of ``now`` whatever the day (``ops.stats.wave``).
    wave: Wave | None = None

    @property
    def week_start(self) -> datetime:
        return self.days[-RATE_DAYS].start

    def as_dict(self) -> dict[str, Any]:
        """The numbers as JSON-ready data: the JSON view and ``reminders_stats --json``."""
        return {
            "date": self.day.isoformat(),
            "time_zone": self.time_zone,
            "generated_at": local_iso(self.now),
            "start": local_iso(self.start),
            "end": local_iso(self.end),
            "totals": self.totals.as_dict(),
            "duration": spread_dict(self.duration),
            "lateness": spread_dict(self.lateness),
            "kinds": [kind.as_dict() for kind in self.kinds],
            "channels": [channel.as_dict() for channel in self.channels],
            "week_start": local_iso(self.week_start),
            "hours": [hour.as_dict() for hour in self.hours],
            "days": [day.as_dict() for day in self.days],
            "failures": {
                "by_code": [group.as_dict() for group in self.failures],
                "latest": [run.as_dict() for run in self.latest_failures],
            },
            "plan": {
                "horizon_seconds": PLAN_HORIZON.total_seconds(),
                "priorities": [plan.as_dict() for plan in self.plan],
            },
            "schedulers": {
                "max_age_seconds": self.heartbeat_max_age,
                "heartbeats": [scheduler.as_dict() for scheduler in self.schedulers],
            },
            "workers": self.workers.as_dict(),
            "recalled_last_24_hours": self.recalled,
            "wave": self.wave.as_dict() if self.wave is not None else None,
        }


def compute(
    day: date | None = None, now: datetime | None = None, *, sql_percentiles: bool | None = None
) -> Stats:
    """The numbers of ``day`` (default: today in ``settings.TIME_ZONE``) as of ``now``.

    ``sql_percentiles``: compute percentiles in the database (default: on PostgreSQL).
    """
    now = now or timezone.now()
    day = day or today(now)
    start, end = day_bounds(day)
    earlier = [day_bounds(day - timedelta(days=n))[0] for n in range(CHART_DAYS - 1, 0, -1)]
    hours = [*hour_starts(start, end), end]
    days = [*earlier, start]

    runs = TaskRun.objects.all()
    of_day = runs.filter(due_at__gte=start, due_at__lt=end)
    groups = DayGroups.fold(by_hour_kind_channel(of_day, hours))
    of_days = by_day(runs.filter(due_at__gte=days[0], due_at__lt=start), days)
    week_before = by_channel(runs.filter(due_at__gte=days[-RATE_DAYS], due_at__lt=start))
    sent = of_day.filter(status=TaskRun.Status.SENT)
    if sql_percentiles is None:
        sql_percentiles = connection.vendor == "postgresql"
    spreads = (spreads_in_sql if sql_percentiles else spreads_in_python)(sent, hours)

    return Stats(
        day=day,
        time_zone=zone_name(),
        now=now,
        start=start,
        end=end,
        totals=groups.totals,
        duration=spreads.duration.get(None, Spread()),
        lateness=spreads.lateness.get(None, Spread()),
        kinds=kinds(groups, spreads),
        channels=channels(groups, week_before),
        hours=hour_buckets(hours, groups, spreads),
        days=day_buckets(days, of_days, day, end, groups.totals),
        failures=failure_groups(of_day),
        latest_failures=latest_failures(of_day),
        plan=plan(now),
        schedulers=schedulers(now),
        workers=workers(now),
        heartbeat_max_age=conf.HEARTBEAT_MAX_AGE_SECONDS,
        recalled=recalled(now),
        wave=wave(now),
    )
