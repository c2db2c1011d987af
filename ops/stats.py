"""Every number of the ops dashboard, its JSON and ``reminders_stats``, for one local day.

**Which runs a day holds.** A day is a local day of ``settings.TIME_ZONE`` (23 or 25
hours across a DST change), and its runs are the runs *due* in it (``due_at``), each
counted once by its status now. So a day's figures add up: ``planned`` (every run due
that day but the cancelled ones) = ``pending`` + ``sent`` + ``failed`` + ``expired`` +
``unknown`` + ``skipped``; the hours of a day add up to the day, and a chart's day to
the table's. ``due_at`` rather than ``finished_at``: a day is the plan it was given and
what became of it; a run due at 23:59 and sent at 00:01 is the earlier day's.

**Success rate** of a channel over a period: ``sent / (sent + failed + unknown +
expired)`` of its runs due in the period, i.e. runs sent among the runs that ended one
way or the other. Pending runs have not ended; ``skipped`` (a holiday, a missed
occurrence) and ``cancelled`` ones were never meant to be sent; ``unknown`` counts
against (nobody confirmed the message arrived). None when no run ended. The period is
the day, or the 7 local days ending with it. (The alert check of ``ops.alerts`` applies
the same ratio to runs *finished* in a sliding window.)

**Percentiles** (duration of the last attempt, and lateness: ``due_at`` → ``finished_at``,
both of the day's ``sent`` runs) are continuous, interpolated between the two nearest
ranks exactly as PostgreSQL's ``percentile_cont``: of n sorted values x[0] .. x[n-1],
the p-th is at rank h = (n - 1) * p: x[i] + (h - i) * (x[i+1] - x[i]) with i = floor(h)
(so p50 of an even count is the mean of the middle two). On PostgreSQL they
are computed in SQL (``PERCENTILE_CONT … WITHIN GROUP``: 3 queries, nothing but the
results leaves the server). Elsewhere (SQLite, MariaDB, whose ``PERCENTILE_CONT`` is only
a window function) one query fetches the day's sent runs' kind, due, finished and
duration, and the same formula runs here: exact, and bounded by one day's sent runs
(about 40 bytes each), never by the history. Values are rounded to the millisecond.

**Cost.** A fixed number of aggregate queries, whatever the data (tested): three for
the counts (the day by hour, kind and channel; the 13 earlier days by day, without the
join to the tasks; the week's 6 earlier days by channel), each grouped by status too
with one ``COUNT(*)``; the percentiles (3 on PostgreSQL, 1 elsewhere); two for failures
(by status and code; the latest few); one for the plan and one for django-q2's queue
(conditional ``COUNT(…) FILTER``, through the engine's partial indexes of waiting and
leased runs); one for the heartbeats: 11 on PostgreSQL, 9 elsewhere. The run queries
read the runs due in their days through an index on ``TaskRun.due_at`` where there is
one (without it, each reads the whole table); the figures with and without are in the
README.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings as django_settings
from django.db import connection
from django.db.models import (
    Aggregate,
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    Max,
    Min,
    Q,
    QuerySet,
    Value,
    When,
)
from django.utils import timezone

from reminders import timing
from reminders.models import Priority, ScheduledTask, SchedulerHeartbeat, TaskRun

from . import health
from .conf import settings as conf

logger = logging.getLogger(__name__)

PENDING = (*TaskRun.WAITING, *TaskRun.LEASED)
# Runs that ended without their message confirmed delivered: the failures section.
PROBLEMS = (TaskRun.Status.FAILED, TaskRun.Status.UNKNOWN, TaskRun.Status.EXPIRED)
CHART_DAYS = 14
RATE_DAYS = 7
PLAN_HORIZON = timedelta(hours=1)
LATEST_FAILURES = 10
FAILURE_GROUPS = 50
QUANTILES = (0.5, 0.95)


# Percentiles -----------------------------------------------------------------------------


def percentile(ordered: Sequence[float], fraction: float) -> float | None:
    """``percentile_cont``: linear interpolation between the closest ranks of ``ordered``
    (sorted ascending); None for no values."""
    if not ordered:
        return None
    rank = (len(ordered) - 1) * fraction
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


class PercentileCont(Aggregate):
    """PostgreSQL's ``PERCENTILE_CONT(fraction) WITHIN GROUP (ORDER BY expression)`` of
    intervals (``DurationField``); the fraction is one of our constants, never input."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        super().__init__(
            expression, fraction=repr(float(fraction)), output_field=DurationField(), **extra
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


@dataclass(frozen=True)
class Spread:
    """How many values, and their 50th and 95th percentiles in seconds (None if none)."""

    count: int = 0
    p50: float | None = None
    p95: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        ordered = sorted(values)
        p50, p95 = (_ms(percentile(ordered, q)) for q in QUANTILES)
        return cls(len(ordered), p50, p95)

    @classmethod
    def from_sql(cls, count: int, p50: timedelta | None, p95: timedelta | None) -> Spread:
        return cls(
            count,
            _ms(p50.total_seconds() if p50 is not None else None),
            _ms(p95.total_seconds() if p95 is not None else None),
        )


# Counts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """Runs by what became of them (``pending``: scheduled, queued, running, retrying)."""

    pending: int = 0
    sent: int = 0
    failed: int = 0
    expired: int = 0
    unknown: int = 0
    skipped: int = 0
    cancelled: int = 0

    @property
    def planned(self) -> int:
        """Every run due in the period but the cancelled ones."""
        return self.pending + self.sent + self.failed + self.expired + self.unknown + self.skipped

    @property
    def ended(self) -> int:
        """Runs sent or given up: the success rate's denominator."""
        return self.sent + self.failed + self.unknown + self.expired

    @property
    def success_rate(self) -> float | None:
        return self.sent / self.ended if self.ended else None

    @classmethod
    def of_statuses(cls, statuses: Mapping[str, int]) -> Counts:
        """From runs counted by status."""
        return cls(
            pending=sum(statuses.get(status, 0) for status in PENDING),
            **{
                name: statuses.get(name, 0)
                for name in ("sent", "failed", "expired", "unknown", "skipped", "cancelled")
            },
        )

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.pending + other.pending,
            self.sent + other.sent,
            self.failed + other.failed,
            self.expired + other.expired,
            self.unknown + other.unknown,
            self.skipped + other.skipped,
            self.cancelled + other.cancelled,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "ended": self.ended,
            "success_rate": None if self.success_rate is None else round(self.success_rate, 4),
        }


# Results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    """A stretch of time (an hour of the day, or a day) and its runs due in it."""

    start: datetime
    end: datetime
    label: str
    counts: Counts
    lateness: Spread | None = None  # hours of the day only

    def as_dict(self) -> dict[str, Any]:
        data = {
            "start": local_iso(self.start),
            "end": local_iso(self.end),
            "label": self.label,
            **self.counts.as_dict(),
        }
        if self.lateness is not None:
            data["lateness"] = _spread_dict(self.lateness)
        return data


@dataclass(frozen=True)
class KindDay:
    kind: str
    counts: Counts
    duration: Spread
    lateness: Spread

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **self.counts.as_dict(),
            "duration": _spread_dict(self.duration),
            "lateness": _spread_dict(self.lateness),
        }


@dataclass(frozen=True)
class ChannelRate:
    channel: str
    day: Counts
    week: Counts

    def as_dict(self) -> dict[str, Any]:
        def part(counts: Counts) -> dict[str, Any]:
            data = counts.as_dict()
            return {key: data[key] for key in ("sent", "failed", "unknown", "expired", "ended")} | {
                "success_rate": data["success_rate"]
            }

        return {"channel": self.channel, "day": part(self.day), "week": part(self.week)}


@dataclass(frozen=True)
class FailureGroup:
    status: str
    code: str
    count: int
    last_finished_at: datetime | None
    example: str  # one of the group's messages (the greatest, as the database sorts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "code": self.code,
            "count": self.count,
            "last_finished_at": _iso(self.last_finished_at),
            "example": self.example,
        }


@dataclass(frozen=True)
class FailedRun:
    id: int
    kind: str
    recipient: str
    channel: str
    status: str
    code: str
    message: str
    due_at: datetime
    finished_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "recipient": self.recipient,
            "channel": self.channel,
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "due_at": local_iso(self.due_at),
            "finished_at": _iso(self.finished_at),
        }


@dataclass(frozen=True)
class PriorityPlan:
    """Waiting runs of one priority (their task not paused): due within the next hour,
    and already due (the backlog: how many, and how long the oldest has waited); runs
    claimed and not finished (``queued``, ``running``)."""

    priority: str
    next_hour: int = 0
    backlog: int = 0
    oldest_seconds: float | None = None
    queued: int = 0
    running: int = 0
    paused: int = 0  # waiting runs of paused tasks due by the hour's end: not sent

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Scheduler:
    owner: str
    host: str
    pid: int
    started_at: datetime
    last_tick_at: datetime
    age_seconds: float
    stale: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "started_at": local_iso(self.started_at),
            "last_tick_at": local_iso(self.last_tick_at),
            "age_seconds": round(self.age_seconds, 1),
            "stale": self.stale,
        }


@dataclass(frozen=True)
class ClusterStatus:
    """A django-q2 cluster as it reports itself in django-q2's cache."""

    cluster_id: str
    host: str
    status: str
    workers: int
    uptime_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Workers:
    """What this process can know of the django-q2 workers: the ORM queue always (jobs
    waiting for a worker, and the oldest one's wait; jobs a worker holds), each cluster's
    own report only where django-q2's cache is shared (``ops.health``)."""

    queued: int
    taken: int
    oldest_wait_seconds: float | None
    clusters_known: bool
    clusters: list[ClusterStatus] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "queued": self.queued,
            "taken": self.taken,
            "oldest_wait_seconds": _round(self.oldest_wait_seconds),
            "clusters_known": self.clusters_known,
            "clusters": [cluster.as_dict() for cluster in self.clusters],
        }


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
            "duration": _spread_dict(self.duration),
            "lateness": _spread_dict(self.lateness),
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
        }


def local_iso(moment: datetime) -> str:
    """``moment`` in ISO 8601 on the clock of ``settings.TIME_ZONE``, with its offset."""
    return moment.astimezone(timing.zone(zone_name())).isoformat()


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else local_iso(moment)


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def _spread_dict(spread: Spread) -> dict[str, Any]:
    return {"count": spread.count, "p50": spread.p50, "p95": spread.p95}


# Time --------------------------------------------------------------------------------------


def zone_name() -> str:
    return str(django_settings.TIME_ZONE or "UTC")


def today(now: datetime | None = None) -> date:
    """The local date of ``now`` in ``settings.TIME_ZONE``."""
    return timing.local_date(now or timezone.now(), zone_name())


# Days a caller may ask for: outside, a year cannot hold runs, and the ends of ``date``
# would overflow.
FIRST_YEAR, LAST_YEAR = 1971, 2099


def parse_day(raw: str) -> date:
    """A day written ``YYYY-MM-DD``, from 1971 to 2099; ValueError otherwise."""
    day = date.fromisoformat(raw)
    if len(raw) != 10 or not FIRST_YEAR <= day.year <= LAST_YEAR:
        raise ValueError(f"not a day from {FIRST_YEAR} to {LAST_YEAR}: {raw!r}")
    return day


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The first instant of ``day`` in ``settings.TIME_ZONE`` and of the next day, in UTC:
    Python subtracts and adds aware datetimes of one zone on the wall clock, which a DST
    day would get wrong by an hour."""
    tz = timing.zone(zone_name())
    start = timing.localize(datetime.combine(day, time.min), tz)
    end = timing.localize(datetime.combine(day + timedelta(days=1), time.min), tz)
    return start.astimezone(UTC), end.astimezone(UTC)


def hour_starts(start: datetime, end: datetime) -> list[datetime]:
    """The instants that cut a local day into hours: 23, 24 or 25 of them, by the clock
    of elapsed time (a day's DST change makes one hour's label repeat or go missing)."""
    count = math.ceil((end - start).total_seconds() / 3600)
    return [start + timedelta(hours=i) for i in range(count)]


def _label(moment: datetime, fmt: str) -> str:
    return moment.astimezone(timing.zone(zone_name())).strftime(fmt)


def _bucket_of(bounds: Sequence[datetime]) -> Case:
    """The index of the stretch ``[bounds[i], bounds[i + 1])`` holding a run's due time,
    as SQL every database runs (no time zone functions: MariaDB may lack their tables)."""
    whens = [When(due_at__lt=bound, then=Value(i)) for i, bound in enumerate(bounds[1:-1])]
    return Case(*whens, default=Value(len(bounds) - 2), output_field=IntegerField())


# The queries ----------------------------------------------------------------------------------


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
    by_hour = _by_hour_kind_channel(of_day, hours)
    by_day = _by_day(runs.filter(due_at__gte=days[0], due_at__lt=start), days)
    week_before = _by_channel(runs.filter(due_at__gte=days[-RATE_DAYS], due_at__lt=start))
    sent = of_day.filter(status=TaskRun.Status.SENT)
    if sql_percentiles is None:
        sql_percentiles = connection.vendor == "postgresql"
    spreads = (_spreads_in_sql if sql_percentiles else _spreads_in_python)(sent, hours)

    # One pass over the day's groups: by hour, kind, channel, and all.
    of_hour: dict[int, Counts] = defaultdict(Counts)
    of_kind: dict[str, Counts] = defaultdict(Counts)
    of_channel: dict[str, Counts] = defaultdict(Counts)
    totals = Counts()
    for (hour, kind, channel), counts in by_hour.items():
        of_hour[hour] += counts
        of_kind[kind] += counts
        of_channel[channel] += counts
        totals += counts
    hour_buckets = [
        Bucket(at, hours[i + 1], _label(at, "%H:%M"), of_hour[i], spreads.hours.get(i, Spread()))
        for i, at in enumerate(hours[:-1])
    ]
    day_buckets = [
        *(
            Bucket(at, days[i + 1], _label(at, "%Y-%m-%d"), by_day.get(i, Counts()))
            for i, at in enumerate(days[:-1])
        ),
        Bucket(start, end, day.isoformat(), totals),
    ]
    return Stats(
        day=day,
        time_zone=zone_name(),
        now=now,
        start=start,
        end=end,
        totals=totals,
        duration=spreads.duration.get(None, Spread()),
        lateness=spreads.lateness.get(None, Spread()),
        kinds=[
            KindDay(
                kind,
                of_kind[kind],
                spreads.duration.get(kind, Spread()),
                spreads.lateness.get(kind, Spread()),
            )
            for kind in sorted(of_kind)
        ],
        channels=[
            ChannelRate(
                channel,
                of_channel[channel],
                of_channel[channel] + week_before.get(channel, Counts()),
            )
            for channel in sorted(set(of_channel) | set(week_before))
        ],
        hours=hour_buckets,
        days=day_buckets,
        failures=_failure_groups(of_day),
        latest_failures=_latest_failures(of_day),
        plan=_plan(now),
        schedulers=_schedulers(now),
        workers=_workers(now),
        heartbeat_max_age=conf.HEARTBEAT_MAX_AGE_SECONDS,
    )


# Why three count queries and not one over the 14 days grouped by day or hour, kind and
# channel: on a million runs that one took 250-350 ms (the join to the tasks and a CASE
# for each of 155,000 rows; and PostgreSQL, unable to estimate how many groups a CASE
# makes, sorted them on disk). Only the day needs the kind; only the week, the channel;
# the chart's earlier days need neither. And why ``status`` among the groups with one
# ``COUNT(*)`` rather than a ``COUNT(…) FILTER`` per status: a tenth of the work per row,
# and with an index on ``due_at`` that includes ``status`` and ``task_id`` the runs are
# read from the index alone (figures in the README).


def _by_status(rows: Iterable[Mapping[str, Any]], *keys: str) -> dict[Any, Counts]:
    """Rows of ``keys`` + ``status`` + ``n`` as ``Counts`` per key (one key: the value)."""
    found: dict[Any, dict[str, int]] = defaultdict(dict)
    for row in rows:
        key = tuple(row[k] for k in keys) if len(keys) > 1 else row[keys[0]]
        found[key][row["status"]] = found[key].get(row["status"], 0) + row["n"]
    return {key: Counts.of_statuses(statuses) for key, statuses in found.items()}


def _by_hour_kind_channel(
    of_day: QuerySet[TaskRun], hours: Sequence[datetime]
) -> dict[tuple[int, str, str], Counts]:
    """Query: the day's runs by hour (index into ``hours``), kind and channel."""
    rows = (
        of_day.annotate(bucket=_bucket_of(hours))
        .values("bucket", "task__kind", "task__channel", "status")
        .annotate(n=Count("*"))
        .order_by()
    )
    return _by_status(rows, "bucket", "task__kind", "task__channel")


def _by_day(runs: QuerySet[TaskRun], days: Sequence[datetime]) -> dict[int, Counts]:
    """Query: the earlier days' runs by day (index into ``days``); no join."""
    rows = (
        runs.annotate(bucket=_bucket_of(days))
        .values("bucket", "status")
        .annotate(n=Count("*"))
        .order_by()
    )
    return _by_status(rows, "bucket")


def _by_channel(runs: QuerySet[TaskRun]) -> dict[str, Counts]:
    """Query: the runs of the week's earlier days by channel."""
    rows = runs.values("task__channel", "status").annotate(n=Count("*")).order_by()
    return _by_status(rows, "task__channel")


@dataclass
class _Spreads:
    """Percentiles by kind (None: all kinds) and by hour index of the day."""

    duration: dict[str | None, Spread] = field(default_factory=dict)
    lateness: dict[str | None, Spread] = field(default_factory=dict)
    hours: dict[int, Spread] = field(default_factory=dict)


def _lateness() -> ExpressionWrapper:
    return ExpressionWrapper(F("finished_at") - F("due_at"), output_field=DurationField())


def _spreads_in_sql(sent: QuerySet[TaskRun], bounds: Sequence[datetime]) -> _Spreads:
    """Queries 2 to 4 on PostgreSQL: by kind, by hour, and for the whole day."""
    both = {
        "duration_n": Count("duration"),
        "duration_50": PercentileCont("duration", 0.5),
        "duration_95": PercentileCont("duration", 0.95),
        "lateness_n": Count("finished_at"),
        "lateness_50": PercentileCont(_lateness(), 0.5),
        "lateness_95": PercentileCont(_lateness(), 0.95),
    }
    spreads = _Spreads()
    groups: list[Mapping[str, Any]] = [
        *sent.values("task__kind").annotate(**both).order_by(),
        {"task__kind": None, **sent.aggregate(**both)},
    ]
    for row in groups:
        kind = row["task__kind"]
        spreads.duration[kind] = Spread.from_sql(
            row["duration_n"], row["duration_50"], row["duration_95"]
        )
        spreads.lateness[kind] = Spread.from_sql(
            row["lateness_n"], row["lateness_50"], row["lateness_95"]
        )
    by_hour = (
        sent.annotate(bucket=_bucket_of(bounds))
        .values("bucket")
        .annotate(
            n=Count("finished_at"),
            p50=PercentileCont(_lateness(), 0.5),
            p95=PercentileCont(_lateness(), 0.95),
        )
        .order_by()
    )
    for row in by_hour:
        spreads.hours[row["bucket"]] = Spread.from_sql(row["n"], row["p50"], row["p95"])
    return spreads


def _spreads_in_python(sent: QuerySet[TaskRun], bounds: Sequence[datetime]) -> _Spreads:
    """Query 2 elsewhere: the day's sent runs, four columns each; percentiles here."""
    durations: dict[str | None, list[float]] = defaultdict(list)
    lateness: dict[str | None, list[float]] = defaultdict(list)
    by_hour: dict[int, list[float]] = defaultdict(list)
    rows = sent.values_list("task__kind", "due_at", "finished_at", "duration").order_by()
    for kind, due_at, finished_at, duration in rows.iterator(chunk_size=5000):
        if duration is not None:
            seconds = duration.total_seconds()
            durations[kind].append(seconds)
            durations[None].append(seconds)
        if finished_at is None:  # a sent run always has finished; as the SQL, skip it
            continue
        late = (finished_at - due_at).total_seconds()
        lateness[kind].append(late)
        lateness[None].append(late)
        by_hour[_index(bounds, due_at)].append(late)
    return _Spreads(
        duration={kind: Spread.of(values) for kind, values in durations.items()},
        lateness={kind: Spread.of(values) for kind, values in lateness.items()},
        hours={hour: Spread.of(values) for hour, values in by_hour.items()},
    )


def _index(bounds: Sequence[datetime], moment: datetime) -> int:
    """``_bucket_of`` in Python."""
    for i, bound in enumerate(bounds[1:-1]):
        if moment < bound:
            return i
    return len(bounds) - 2


def _failure_groups(of_day: QuerySet[TaskRun]) -> list[FailureGroup]:
    """Query: the day's failed, unknown and expired runs by status and error code."""
    rows = (
        of_day.filter(status__in=PROBLEMS)
        .values("status", "error_code")
        .annotate(n=Count("pk"), last=Max("finished_at"), example=Max("error_message"))
        .order_by("-n", "status", "error_code")[:FAILURE_GROUPS]
    )
    return [
        FailureGroup(row["status"], row["error_code"], row["n"], row["last"], row["example"] or "")
        for row in rows
    ]


def _latest_failures(of_day: QuerySet[TaskRun]) -> list[FailedRun]:
    """Query: the day's last few runs that failed, ended unknown or expired."""
    rows = (
        of_day.filter(status__in=PROBLEMS)
        .order_by(F("finished_at").desc(nulls_last=True), "-pk")
        .values_list(
            "pk",
            "task__kind",
            "task__recipient",
            "task__channel",
            "status",
            "error_code",
            "error_message",
            "due_at",
            "finished_at",
        )[:LATEST_FAILURES]
    )
    return [FailedRun(*row) for row in rows]


def _plan(now: datetime) -> list[PriorityPlan]:
    """Query: waiting runs due within the hour and claimed runs, by priority (read
    through the engine's partial indexes of waiting and of leased runs)."""
    waiting = Q(status__in=TaskRun.WAITING)
    due = waiting & Q(next_attempt_at__lte=now)
    paused = Q(task__status=ScheduledTask.Status.PAUSED)
    rows = (
        TaskRun.objects.filter(
            (waiting & Q(next_attempt_at__lte=now + PLAN_HORIZON)) | Q(status__in=TaskRun.LEASED)
        )
        .values("priority")
        .annotate(
            next_hour=Count("pk", filter=waiting & Q(next_attempt_at__gt=now) & ~paused),
            backlog=Count("pk", filter=due & ~paused),
            oldest=Min("next_attempt_at", filter=due & ~paused),
            paused=Count("pk", filter=waiting & paused),
            queued=Count("pk", filter=Q(status=TaskRun.Status.QUEUED)),
            running=Count("pk", filter=Q(status=TaskRun.Status.RUNNING)),
        )
        .order_by()
    )
    found: dict[str, PriorityPlan] = {}
    for row in rows:
        name = str(Priority.from_rank(row["priority"]).value)
        oldest = row["oldest"]
        plan = PriorityPlan(
            name,
            next_hour=row["next_hour"],
            backlog=row["backlog"],
            oldest_seconds=_round(max(0.0, (now - oldest).total_seconds())) if oldest else None,
            queued=row["queued"],
            running=row["running"],
            paused=row["paused"],
        )
        # Ranks outside the three are bulk work, as the engine reads them.
        found[name] = _merge(found[name], plan) if name in found else plan
    return [found.get(p.value, PriorityPlan(str(p.value))) for p in Priority]


def _merge(a: PriorityPlan, b: PriorityPlan) -> PriorityPlan:
    oldest = [s for s in (a.oldest_seconds, b.oldest_seconds) if s is not None]
    return PriorityPlan(
        a.priority,
        a.next_hour + b.next_hour,
        a.backlog + b.backlog,
        max(oldest) if oldest else None,
        a.queued + b.queued,
        a.running + b.running,
        a.paused + b.paused,
    )


def _schedulers(now: datetime) -> list[Scheduler]:
    """Query: every scheduler heartbeat (one row per running ``run_reminders``)."""
    max_age = conf.HEARTBEAT_MAX_AGE_SECONDS
    result = []
    for beat in SchedulerHeartbeat.objects.order_by("host", "pid", "owner"):
        age = max(0.0, (now - beat.last_tick_at).total_seconds())
        result.append(
            Scheduler(
                beat.owner,
                beat.host,
                beat.pid,
                beat.started_at,
                beat.last_tick_at,
                age,
                age > max_age,
            )
        )
    return result


def _workers(now: datetime) -> Workers:
    """Query: django-q2's ORM queue; and the clusters' own reports where knowable."""
    from django_q.models import OrmQ

    queue = OrmQ.objects.aggregate(
        waiting=Count("pk", filter=Q(lock__lte=now)),
        taken=Count("pk", filter=Q(lock__gt=now)),
        oldest=Min("lock", filter=Q(lock__lte=now)),
    )
    oldest = queue["oldest"]
    clusters: list[ClusterStatus] = []
    known = health.stats_shared()
    if known:
        try:
            clusters = _clusters()
        except Exception:
            logger.warning("stats: cannot read django-q2's cluster stats", exc_info=True)
            known = False
    return Workers(
        queued=queue["waiting"],
        taken=queue["taken"],
        oldest_wait_seconds=max(0.0, (now - oldest).total_seconds()) if oldest else None,
        clusters_known=known,
        clusters=clusters,
    )


def _clusters() -> list[ClusterStatus]:
    from django_q.status import Stat

    return [
        ClusterStatus(
            str(stat.cluster_id),
            str(stat.host),
            str(stat.status),
            len(stat.workers or []),
            float(stat.uptime()),
        )
        for stat in Stat.get_all()
    ]
