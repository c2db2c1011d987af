"""Ops are told early and loudly that a working-day calendar runs out: from 60 days
before its coverage ends until the next year is covered, one grouped alert a day, and a
gauge of the covered-until date per calendar. At clocks the tests set: chinesecalendar
1.11 covers up to 2026."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from ops import alerts, metrics
from ops.models import AlertEvent
from reminders.calendars import coverage as calendar_coverage
from reminders.calendars.days import CalendarYear
from tests.ops.conftest import Clock

pytestmark = pytest.mark.django_db

SHANGHAI = ZoneInfo("Asia/Shanghai")


@pytest.fixture(autouse=True)
def _warn_60_days_ahead(settings):
    settings.REMINDERS_CALENDAR_WARN_DAYS = 60


def test_ending__never_with_warnings_off(settings):
    settings.REMINDERS_CALENDAR_WARN_DAYS = 0
    assert calendar_coverage.ending(date(2027, 1, 4)) == []


def at(day: date, hour: int = 10) -> datetime:
    return datetime.combine(day, time(hour), SHANGHAI)


def test_ending__from_60_days_before_the_end_until_the_next_year_is_covered():
    assert calendar_coverage.ending(date(2026, 11, 1)) == []  # 60 days left
    [cn] = calendar_coverage.ending(date(2026, 11, 2))
    assert (cn.calendar, cn.until, cn.days_left, cn.next_year) == (
        "cn",
        date(2026, 12, 31),
        59,
        2027,
    )
    [cn] = calendar_coverage.ending(date(2027, 1, 4))
    assert cn.days_left < 0
    CalendarYear.objects.create(calendar="cn", year=2027, note="notice")
    assert calendar_coverage.ending(date(2027, 1, 4)) == []
    assert calendar_coverage.ending(date(2027, 11, 2))[0].next_year == 2028


def test_ending__only_calendars_in_use(settings):
    settings.REMINDERS_CALENDARS = {
        "cn": "reminders.calendars.ChineseCalendar",
        "unused": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [2020, 2020]},
        },
    }
    assert [c.calendar for c in calendar_coverage.ending(date(2026, 12, 4))] == ["cn"]


def test_alert__once_a_day_grouped_until_the_next_year_is_covered(admins, mailoutbox, settings):
    settings.REMINDERS_CALENDARS = {
        "cn": "reminders.calendars.ChineseCalendar",
        "four": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [2026, 2026]},
        },
    }
    settings.REMINDERS_KINDS = {"follow_up": {"calendar": "four"}}
    clock = Clock(at(date(2026, 11, 1)))
    assert clock.step().checked == 0  # 60 days left: not yet
    result = clock.step(24 * 3600)  # 2 November: 59 days left
    assert result.checked == 2
    [alert] = result.opened
    assert (alert.type, alert.event_count) == ("calendar_ending", 2)
    subject = mailoutbox[0].subject
    assert "2 working-day calendars run out soon" in subject
    assert "'cn' is covered until 2026-12-31 (59 days left)" in mailoutbox[0].body
    assert "'four'" in mailoutbox[0].body
    assert clock.step(3600).checked == 0  # the same day: told already
    assert clock.step(23 * 3600).checked == 2  # the next day, again
    CalendarYear.objects.create(calendar="cn", year=2027, note="notice")
    CalendarYear.objects.create(calendar="four", year=2027, note="notice")
    assert clock.step(24 * 3600).checked == 0
    assert AlertEvent.objects.filter(type="calendar_ending").count() == 4


def covered_until(now: datetime) -> dict[str, float]:
    name = "reminders_calendar_covered_until_timestamp_seconds"
    return {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in metrics.render(now).decode().splitlines()
        if line.startswith(name + "{")
    }


def test_metric__covered_until_per_calendar_as_a_timestamp(settings):
    settings.REMINDERS_CALENDARS = {
        "cn": "reminders.calendars.ChineseCalendar",
        "four": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [2026, 2028]},
        },
    }
    now = at(date(2026, 12, 4))
    assert covered_until(now) == {
        "cn": datetime(2027, 1, 1, tzinfo=SHANGHAI).timestamp(),
        "four": datetime(2029, 1, 1, tzinfo=SHANGHAI).timestamp(),
    }
    CalendarYear.objects.create(calendar="cn", year=2027, note="notice")
    assert covered_until(now)["cn"] == datetime(2028, 1, 1, tzinfo=SHANGHAI).timestamp()


def test_check__runs_in_the_alert_step():
    assert alerts.check_calendar_coverage(at(date(2026, 6, 1))) == 0
    assert alerts.check_calendar_coverage(at(date(2026, 12, 4))) == 1
    assert alerts.check_calendar_coverage(at(date(2026, 12, 4) + timedelta(hours=3))) == 0
