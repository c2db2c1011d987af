from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from reminders.engine import planning
from reminders.schedule import timing

NEW_YORK = "America/New_York"


def occurrences(expression: str, tz: str, start: datetime, count: int) -> list[datetime]:
    found, moment = [], start
    for _ in range(count):
        moment = timing.next_occurrence(expression, tz, moment)
        found.append(moment)
    return found


def local(moments: list[datetime], tz: str) -> list[str]:
    return [m.astimezone(ZoneInfo(tz)).strftime("%m-%d %H:%M %Z") for m in moments]


def test_next_occurrence__daily_0230_runs_once_on_spring_forward_day():
    # 2026-03-08: New York clocks jump from 02:00 EST to 03:00 EDT; 02:30 does not exist.
    found = occurrences("30 2 * * *", NEW_YORK, datetime(2026, 3, 6, 12, tzinfo=UTC), 3)
    assert local(found, NEW_YORK) == ["03-07 02:30 EST", "03-08 03:30 EDT", "03-09 02:30 EDT"]


def test_next_occurrence__daily_0230_runs_once_on_fall_back_day():
    # 2026-11-01: clocks go back from 02:00 EDT to 01:00 EST; 01:00-02:00 happens twice.
    found = occurrences("30 2 * * *", NEW_YORK, datetime(2026, 10, 31, 0, tzinfo=UTC), 3)
    assert local(found, NEW_YORK) == ["10-31 02:30 EDT", "11-01 02:30 EST", "11-02 02:30 EST"]


def test_next_occurrence__ambiguous_time_fires_at_its_first_instance_only():
    found = occurrences("30 1 * * *", NEW_YORK, datetime(2026, 10, 31, 12, tzinfo=UTC), 2)
    assert local(found, NEW_YORK) == ["11-01 01:30 EDT", "11-02 01:30 EST"]
    assert found[1] - found[0] == timedelta(hours=25)


def test_next_occurrence__is_strictly_increasing_through_a_gap():
    found = occurrences("*/20 * * * *", NEW_YORK, datetime(2026, 3, 8, 6, 0, tzinfo=UTC), 8)
    assert found == sorted(set(found))
    assert local(found, NEW_YORK)[:4] == [
        "03-08 01:20 EST",
        "03-08 01:40 EST",
        "03-08 03:00 EDT",
        "03-08 03:20 EDT",
    ]


def test_next_occurrence__uses_the_tasks_zone_not_utc():
    found = timing.next_occurrence("0 9 * * *", "Asia/Shanghai", datetime(2026, 1, 1, tzinfo=UTC))
    assert found == datetime(2026, 1, 1, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("0 9 * * *", True),
        ("0 9 * * 1", True),
        ("@daily", True),
        ("0 9,17 * * *", False),
        ("*/5 9 * * *", False),
        ("@hourly", False),
        ("0 * * * *", False),
    ],
)
def test_fires_at_most_daily(expression, expected):
    assert timing.fires_at_most_daily(expression) is expected


@pytest.mark.parametrize("expression", ["", "0 9 * *", "0 9 * * * *", "61 9 * * *", "every day"])
def test_validate_cron__rejects(expression):
    with pytest.raises(timing.InvalidSchedule):
        timing.validate_cron(expression)


@pytest.mark.parametrize("expression", ["0 9 30 2 *", "0 9 31 4,6,9,11 *"])
def test_validate_cron__rejects_a_schedule_that_never_fires(expression):
    with pytest.raises(timing.InvalidSchedule, match="never fires"):
        timing.validate_cron(expression)


@pytest.mark.parametrize(
    ("expression", "after", "fires"),
    [
        # Feb 29 may be 8 years away (2100 is no leap year).
        ("0 9 29 2 *", datetime(2096, 3, 1, tzinfo=UTC), datetime(2104, 2, 29, 9, tzinfo=UTC)),
        # Day 30 or a Monday, in February: any Monday of it.
        ("0 9 30 2 1", datetime(2026, 3, 1, tzinfo=UTC), datetime(2027, 2, 1, 9, tzinfo=UTC)),
        ("@yearly", datetime(2026, 3, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_validate_cron__accepts_a_rare_schedule_that_fires(expression, after, fires):
    assert timing.validate_cron(expression) is None  # accepted: no InvalidSchedule
    assert timing.next_occurrence(expression, "UTC", after) == fires


def test_zone__rejects_unknown_name():
    with pytest.raises(timing.InvalidSchedule, match="Mars/Olympus"):
        timing.zone("Mars/Olympus")


def test_stagger__is_deterministic_per_recipient_and_spread_across_recipients():
    args = {"jitter_seconds": 300, "batches": 1, "batch_interval_seconds": 60}
    first = timing.stagger(recipient="u1", **args)
    assert first == timing.stagger(recipient="u1", **args)
    assert timedelta(0) <= first < timedelta(seconds=300)
    offsets = {timing.stagger(recipient=f"u{n}", **args) for n in range(200)}
    assert len(offsets) > 100  # spread out, not all at one second


@pytest.mark.django_db
def test_stagger__a_recipient_s_messages_keep_the_order_of_their_occurrences(make_task):
    # Two follow-ups a minute apart under a 10-minute jitter: still in order.
    from django.test import override_settings

    with override_settings(REMINDERS_KINDS={"follow_up": {"jitter_seconds": 600}}):
        task = make_task("follow_up", "zhangsan", at=None, cron="* * * * *", tz="UTC")
        at = task.next_run
        runs = [planning.new_run(task, at + timedelta(minutes=n)) for n in range(5)]
    dues = [run.due_at for run in runs]
    assert dues == sorted(dues) and len(set(dues)) == 5


def test_stagger__splits_recipients_into_batches_a_minute_apart():
    slots = [
        timing.stagger(
            recipient=f"user{i}",
            jitter_seconds=0,
            batches=10,
            batch_interval_seconds=60,
        )
        for i in range(1000)
    ]
    counts = {slot: slots.count(slot) for slot in set(slots)}
    assert sorted(counts) == [timedelta(minutes=m) for m in range(10)]
    assert all(60 <= n <= 140 for n in counts.values()), counts
