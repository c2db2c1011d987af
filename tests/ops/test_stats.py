"""ops.stats: every number of the dashboard against the fortnight of ``stats_world``, whose
docstring lists the runs; the expected figures here are worked out by hand from it.

Percentiles are ``percentile_cont``'s: of n sorted values, the p-th is at rank
h = (n - 1) * p, interpolated between the ranks around it. E.g. follow_up's lateness
[1, 2, 4, 10, 60]: p50 at h = 2 is 4; p95 at h = 3.8 is 10 + 0.8 * (60 - 10) = 50. The
same figures are expected on every database, computed in SQL on PostgreSQL and from the
fetched values elsewhere (and both ways on PostgreSQL).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

from ops import stats
from ops.stats import Counts, Spread, percentile
from reminders.models import ScheduledTask, TaskRun

from .stats_world import DAY, END, NOW, START, World, build, local

pytestmark = pytest.mark.django_db

ON_POSTGRES = connection.vendor == "postgresql"
BOTH_WAYS = [
    pytest.param(None, id="default"),
    pytest.param(False, id="python"),
    pytest.param(
        True,
        id="sql",
        marks=pytest.mark.skipif(not ON_POSTGRES, reason="PERCENTILE_CONT is PostgreSQL's"),
    ),
]


@pytest.fixture
def world() -> World:
    return build()


def counts(**given: int) -> Counts:
    return Counts(**given)


# The percentile definition ------------------------------------------------------------


def test_percentile_interpolates_between_ranks():
    assert percentile([], 0.5) is None
    assert percentile([7.0], 0.95) == 7.0
    assert percentile([1, 2, 4, 10, 60], 0.5) == 4
    assert percentile([1, 2, 4, 10, 60], 0.95) == pytest.approx(50)
    assert percentile([100, 300], 0.5) == 200
    assert percentile([100, 300], 0.95) == pytest.approx(290)
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([1, 2, 3, 4], 0.0) == 1
    assert percentile([1, 2, 3, 4], 1.0) == 4


def test_spread_rounds_to_the_millisecond():
    assert Spread.of([0.0001, 0.0004, 1.23456]) == Spread(3, 0.0, 1.111)


# The day ----------------------------------------------------------------------------------


@pytest.mark.parametrize("sql", BOTH_WAYS)
def test_the_day_by_kind(world, sql):
    numbers = stats.compute(DAY, NOW, sql_percentiles=sql)
    assert (numbers.start, numbers.end) == (START, END)
    assert numbers.totals == counts(
        pending=4, sent=7, failed=2, unknown=1, expired=1, skipped=1, cancelled=1
    )
    assert numbers.totals.planned == 16
    assert numbers.totals.ended == 11
    assert numbers.totals.success_rate == pytest.approx(7 / 11)
    assert [(k.kind, k.counts) for k in numbers.kinds] == [
        ("birthday", counts(pending=2)),
        ("daily_report", counts(sent=2, expired=1, skipped=1)),
        ("follow_up", counts(pending=2, sent=5, failed=2, unknown=1, cancelled=1)),
    ]
    assert [k.counts.planned for k in numbers.kinds] == [2, 4, 10]


@pytest.mark.parametrize("sql", BOTH_WAYS)
def test_duration_and_lateness_percentiles(world, sql):
    numbers = stats.compute(DAY, NOW, sql_percentiles=sql)
    by_kind = {k.kind: (k.duration, k.lateness) for k in numbers.kinds}
    # follow_up durations [0.25, 0.5, 1.0, 1.5, 2.0]: p95 at h = 3.8 → 1.5 + 0.8 * 0.5.
    assert by_kind["follow_up"] == (Spread(5, 1.0, 1.9), Spread(5, 4.0, 50.0))
    # daily_report: one sent run without a duration; lateness [100, 300].
    assert by_kind["daily_report"] == (Spread(1, 0.2, 0.2), Spread(2, 200.0, 290.0))
    assert by_kind["birthday"] == (Spread(), Spread())
    # All: durations [0.2, 0.25, 0.5, 1.0, 1.5, 2.0] → p50 at h = 2.5, p95 at h = 4.75;
    # lateness [1, 2, 4, 10, 60, 100, 300] → p50 at h = 3, p95 at h = 5.7.
    assert numbers.duration == Spread(6, 0.75, 1.875)
    assert numbers.lateness == Spread(7, 10.0, 240.0)


@pytest.mark.parametrize("sql", BOTH_WAYS)
def test_hours_of_the_day(world, sql):
    numbers = stats.compute(DAY, NOW, sql_percentiles=sql)
    hours = numbers.hours
    assert len(hours) == 24
    assert [h.label for h in hours[:3]] == ["00:00", "01:00", "02:00"]
    assert hours[9].start == local(9) and hours[9].end == local(10)
    busy = {h.label: h.counts for h in hours if h.counts != Counts()}
    assert busy == {
        "00:00": counts(sent=1),
        "08:00": counts(skipped=1),
        "09:00": counts(sent=5, expired=1),
        "10:00": counts(sent=1, failed=1, pending=2),
        "11:00": counts(failed=1, unknown=1),
        "12:00": counts(cancelled=1),
        "14:00": counts(pending=1),
        "23:00": counts(pending=1),
    }
    # The hours add up to the day.
    assert sum((h.counts for h in hours), Counts()) == numbers.totals
    late = {h.label: h.lateness for h in hours if h.lateness and h.lateness.count}
    # 09:00: [2, 4, 10, 100, 300]: p95 at h = 3.8 → 100 + 0.8 * 200.
    assert late == {
        "00:00": Spread(1, 1.0, 1.0),
        "09:00": Spread(5, 10.0, 260.0),
        "10:00": Spread(1, 60.0, 60.0),
    }
    assert hours[5].lateness == Spread()


def test_fourteen_days(world):
    numbers = stats.compute(DAY, NOW)
    days = numbers.days
    assert len(days) == 14
    assert days[-1].counts == numbers.totals
    assert days[0].label == "2026-02-25" and days[-1].label == "2026-03-10"
    assert days[0].start == START - timedelta(days=13)
    assert days[-1].end == END
    sent_failed = {d.label: (d.counts.sent, d.counts.failed) for d in days}
    assert sent_failed == {
        "2026-02-25": (1, 0),
        "2026-02-26": (0, 0),
        "2026-02-27": (0, 0),
        "2026-02-28": (0, 0),
        "2026-03-01": (0, 0),
        "2026-03-02": (0, 0),
        "2026-03-03": (5, 5),
        "2026-03-04": (0, 0),
        "2026-03-05": (0, 0),
        "2026-03-06": (0, 0),
        "2026-03-07": (2, 1),
        "2026-03-08": (0, 0),
        "2026-03-09": (1, 0),
        "2026-03-10": (7, 2),
    }
    assert days[7].counts == counts(expired=1)
    assert days[10].counts == counts(sent=2, failed=1, unknown=1)


def test_success_rate_by_channel(world):
    numbers = stats.compute(DAY, NOW)
    rates = {c.channel: (c.day, c.week) for c in numbers.channels}
    assert rates == {
        # Birthday's pending runs count nowhere; D-7 is outside the 7 days.
        "memory": (
            counts(sent=5, failed=2, unknown=1, pending=4, cancelled=1),
            counts(sent=8, failed=3, unknown=1, expired=1, pending=4, cancelled=1),
        ),
        "memory_dedup": (
            counts(sent=2, expired=1, skipped=1),
            counts(sent=2, expired=1, skipped=1, unknown=1),
        ),
    }
    memory_day, memory_week = rates["memory"]
    assert (memory_day.ended, memory_day.success_rate) == (8, 5 / 8)
    assert (memory_week.ended, memory_week.success_rate) == (13, 8 / 13)
    dedup_day, dedup_week = rates["memory_dedup"]
    assert (dedup_day.ended, dedup_day.success_rate) == (3, pytest.approx(2 / 3))
    assert (dedup_week.ended, dedup_week.success_rate) == (4, 0.5)
    assert numbers.week_start == START - timedelta(days=6)


def test_no_run_ended_has_no_rate():
    assert Counts(pending=3, skipped=2, cancelled=1).success_rate is None


def test_failures_by_reason_and_the_latest(world):
    numbers = stats.compute(DAY, NOW)
    assert [
        (g.status, g.code, g.count, g.last_finished_at, g.example) for g in numbers.failures
    ] == [
        ("failed", "recipient", 2, local(11, 0, 3), "81013 user xyz"),
        ("expired", "deadline", 1, local(12), "Its deadline passed before it could be sent."),
        ("unknown", "in_doubt", 1, local(11, 31), "read timeout"),
    ]
    runs = world.runs
    assert [r.id for r in numbers.latest_failures] == [runs[n].pk for n in ("14", "7", "6", "5")]
    latest = numbers.latest_failures[-1]
    assert (latest.kind, latest.recipient, latest.channel, latest.status, latest.code) == (
        "follow_up",
        "user-f",
        "memory",
        "failed",
        "recipient",
    )
    assert (latest.message, latest.due_at, latest.finished_at) == (
        "81013 user not found",
        local(10, 30),
        local(10, 30, 5),
    )


def test_the_plan_now(world):
    plan = {p.priority: p for p in stats.compute(DAY, NOW).plan}
    assert list(plan) == ["high", "normal", "low"]
    assert plan["high"] == stats.PriorityPlan(
        "high", next_hour=1, backlog=1, oldest_seconds=300.0, queued=1, running=1
    )
    # #8 waits since 14:00; the paused task's run is held, not backlog; #9 is due later.
    assert plan["normal"] == stats.PriorityPlan(
        "normal", next_hour=0, backlog=1, oldest_seconds=3600.0, paused=1
    )
    assert plan["low"] == stats.PriorityPlan("low", next_hour=1)


def test_schedulers_with_the_stale_marked(world, settings):
    settings.OPS_HEARTBEAT_MAX_AGE_SECONDS = 60
    schedulers = stats.compute(DAY, NOW).schedulers
    assert [(s.host, s.pid, s.age_seconds, s.stale) for s in schedulers] == [
        ("alpha", 11, 5.0, False),
        ("beta", 22, 300.0, True),
    ]
    settings.OPS_HEARTBEAT_MAX_AGE_SECONDS = 600
    assert [s.stale for s in stats.compute(DAY, NOW).schedulers] == [False, False]


def test_workers_from_the_queue(db):
    OrmQ.objects.create(key="reminders", payload="x", lock=NOW - timedelta(seconds=30))
    OrmQ.objects.create(key="reminders", payload="y", lock=NOW - timedelta(seconds=5))
    OrmQ.objects.create(key="reminders", payload="z", lock=NOW + timedelta(seconds=60))
    workers = stats.compute(DAY, NOW).workers
    assert (workers.queued, workers.taken, workers.oldest_wait_seconds) == (2, 1, 30.0)
    # The test settings' cache is local memory: each cluster's report is not knowable.
    assert (workers.clusters_known, workers.clusters) == (False, [])


def test_an_empty_day(db):
    numbers = stats.compute(date(2030, 1, 1), NOW)
    assert numbers.totals == Counts() and numbers.totals.planned == 0
    assert numbers.kinds == [] and numbers.channels == [] and numbers.failures == []
    assert numbers.duration == Spread() and numbers.lateness == Spread()
    assert [p.priority for p in numbers.plan] == ["high", "normal", "low"]
    assert numbers.schedulers == []


def test_default_day_is_today_in_the_time_zone(db, settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    late_evening_utc = datetime(2026, 3, 9, 17, 0, tzinfo=UTC)  # 01:00 on the 10th there
    assert stats.compute(now=late_evening_utc).day == DAY
    settings.TIME_ZONE = "America/New_York"
    assert stats.compute(now=late_evening_utc).day == date(2026, 3, 9)


# DST days ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("day", "hours", "labels", "due", "index"),
    [
        # Spring forward: 02:00 does not exist; 03:30 EDT is the third hour.
        (date(2026, 3, 8), 23, ["00:00", "01:00", "03:00"], datetime(2026, 3, 8, 7, 30), 2),
        # Fall back: 01:00 twice; 01:30 EST (06:30 UTC) is in the second 01:00.
        (date(2026, 11, 1), 25, ["00:00", "01:00", "01:00"], datetime(2026, 11, 1, 6, 30), 2),
    ],
)
def test_a_dst_day_has_its_own_hours(db, settings, day, hours, labels, due, index):
    settings.TIME_ZONE = "America/New_York"
    w = World()
    w.task("f", "follow_up", "memory")
    w.run("x", "f", due.replace(tzinfo=UTC), "sent", late=5, took=1)
    numbers = stats.compute(day, NOW)
    assert len(numbers.hours) == hours
    assert [h.label for h in numbers.hours[:3]] == labels
    assert numbers.hours[index].counts == counts(sent=1)
    assert numbers.hours[index].lateness == Spread(1, 5.0, 5.0)
    assert numbers.end - numbers.start == timedelta(hours=hours)


# JSON ----------------------------------------------------------------------------------------


def test_as_dict_carries_every_number(world):
    data = stats.compute(DAY, NOW).as_dict()
    assert data["date"] == "2026-03-10"
    assert data["time_zone"] == "Asia/Shanghai"
    assert data["start"] == "2026-03-10T00:00:00+08:00"
    assert data["totals"] == {
        "planned": 16,
        "pending": 4,
        "sent": 7,
        "failed": 2,
        "expired": 1,
        "unknown": 1,
        "skipped": 1,
        "cancelled": 1,
        "ended": 11,
        "success_rate": 0.6364,
    }
    assert data["lateness"] == {"count": 7, "p50": 10.0, "p95": 240.0}
    follow_up = data["kinds"][2]
    assert follow_up["kind"] == "follow_up"
    assert follow_up["duration"] == {"count": 5, "p50": 1.0, "p95": 1.9}
    assert data["channels"][0] == {
        "channel": "memory",
        "day": {
            "sent": 5,
            "failed": 2,
            "unknown": 1,
            "expired": 0,
            "ended": 8,
            "success_rate": 0.625,
        },
        "week": {
            "sent": 8,
            "failed": 3,
            "unknown": 1,
            "expired": 1,
            "ended": 13,
            "success_rate": 0.6154,
        },
    }
    assert data["hours"][9]["lateness"] == {"count": 5, "p50": 10.0, "p95": 260.0}
    assert data["hours"][9]["sent"] == 5
    assert [d["sent"] for d in data["days"]][-4:] == [2, 0, 1, 7]
    assert data["failures"]["by_code"][0]["count"] == 2
    assert len(data["failures"]["latest"]) == 4
    assert data["plan"]["priorities"][0]["backlog"] == 1
    assert data["schedulers"]["heartbeats"][1]["stale"] is True
    assert data["workers"]["clusters_known"] is False


# Cost ------------------------------------------------------------------------------------------


def _queries() -> int:
    with CaptureQueriesContext(connection) as captured:
        stats.compute(DAY, NOW)
    return len(captured)


def test_query_count_does_not_grow_with_the_data(world):
    # The working-day calendars' entries (tomorrow's forecast) are read once in a while
    # per process, not per computation (reminders.calendars.days): read before counting.
    stats.compute(DAY, NOW)
    first = _queries()
    assert first == (19 if ON_POSTGRES else 17)
    # Ten times the runs, on more kinds, channels, days and failure codes.
    more = World()
    for i, (kind, channel) in enumerate(
        [("follow_up", "memory"), ("inquiry_timeout", "memory_dedup"), ("birthday", "console")]
    ):
        more.task(f"t{i}", kind, channel, priority=("high", "normal", "low")[i])
    statuses = ["sent", "failed", "unknown", "expired", "skipped", "scheduled", "queued"]
    for n in range(420):
        status = statuses[n % len(statuses)]
        more.run(
            f"m{n}",
            f"t{n % 3}",
            local(n % 24, n % 60, days=-(n % 14)),
            status,
            late=n % 90 if status in TaskRun.FINISHED else None,
            took=(n % 7) / 4 if status == "sent" else None,
            code=f"code{n % 11}" if status in ("failed", "unknown") else "",
            rank=n % 3,
        )
    assert TaskRun.objects.count() > 10 * 40
    assert ScheduledTask.objects.count() > 5
    assert _queries() == first
