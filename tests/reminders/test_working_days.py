"""Reports follow the working-day calendar: none on rest days, recorded as skipped with
the reason; make-up weekend days get theirs; a year the calendar does not cover is
never a guess."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import TestCase

from reminders import calendars, kinds, signals
from reminders.checks import check_calendars
from reminders.engine import dispatch
from reminders.models import ScheduledTask
from reminders.schedule import timing
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

SHANGHAI = "Asia/Shanghai"


def nine_am(day: date) -> datetime:
    return timing.localize(datetime.combine(day, time(9)), timing.zone(SHANGHAI))


def days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def daily_report_from(make_task: Any, first: date, **fields: Any) -> ScheduledTask:
    """A daily report at 09:00 in Shanghai whose next occurrence is ``first``'s."""
    task = make_task("daily_report", cron="0 9 * * *", tz=SHANGHAI)
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=nine_am(first), **fields)
    task.refresh_from_db()
    return task


def each_day(first: date, last: date) -> int:
    """The scheduler and workers once a day at 10:00, past the reports' stagger, on a
    clock the test sets; returns messages sent."""
    return sum(tick(now=nine_am(day) + timedelta(hours=1)) for day in days(first, last))


def outcomes(task: ScheduledTask) -> dict[date, tuple[str, str]]:
    return {run.run_date: (run.status, run.error_code) for run in task.runs.all()}


def test_kinds__daily_and_weekly_reports_follow_the_chinese_calendar():
    assert kinds.policy("daily_report").calendar == "cn"
    assert kinds.policy("weekly_report").calendar == "cn"
    assert kinds.policy("follow_up").calendar == ""


def test_daily_report__skips_national_day_and_goes_on_make_up_days(make_task, outbox):
    # 2026: Sunday 20 Sep worked, 1-7 Oct rest, Saturday 10 Oct worked.
    task = daily_report_from(make_task, date(2026, 9, 19))
    sent = each_day(date(2026, 9, 19), date(2026, 10, 11))
    got = outcomes(task)
    holiday = ("skipped", "holiday")
    assert got[date(2026, 9, 19)] == holiday  # an ordinary Saturday
    assert got[date(2026, 9, 20)] == ("sent", "")  # a make-up working Sunday
    assert got[date(2026, 9, 25)] == holiday  # Mid-autumn Festival, a Friday
    assert got[date(2026, 9, 30)] == ("sent", "")
    assert all(got[day] == holiday for day in days(date(2026, 10, 1), date(2026, 10, 7)))
    assert got[date(2026, 10, 10)] == ("sent", "")  # a make-up working Saturday
    assert got[date(2026, 10, 11)] == holiday
    worked = [day for day, (status, _) in got.items() if status == "sent"]
    assert sent == len(outbox) == len(worked) == 11
    run = task.runs.get(run_date=date(2026, 10, 1))
    assert "2026-10-01" in run.error_message
    assert "rest day" in run.error_message
    assert run.next_attempt_at is None


def test_daily_report__a_task_set_to_every_day_sends_on_holidays(make_task, outbox):
    task = daily_report_from(make_task, date(2026, 10, 1), calendar="")
    assert each_day(date(2026, 10, 1), date(2026, 10, 4)) == 4
    assert set(outcomes(task).values()) == {("sent", "")}


def test_daily_report__a_task_may_name_another_calendar(make_task, settings):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar"},
        "four": {"BACKEND": "tests.support.calendars.FourDayWeek"},
    }
    task = daily_report_from(make_task, date(2026, 10, 1), calendar="four")
    each_day(date(2026, 10, 1), date(2026, 10, 2))  # Thursday (a holiday in China), Friday
    assert outcomes(task) == {
        date(2026, 10, 1): ("sent", ""),
        date(2026, 10, 2): ("skipped", "holiday"),
    }


def test_task_calendar__must_be_configured(make_task):
    task = make_task("daily_report", cron="0 9 * * *")
    task.calendar = "moon"
    with pytest.raises(ValidationError) as caught:
        task.full_clean()
    assert "calendar" in caught.value.message_dict
    task.calendar = "cn"
    task.full_clean()


def test_uncovered_year__under_the_skip_rule_is_skipped_and_ops_are_told(
    make_task, outbox, settings
):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar", "UNCOVERED": "skip"}
    }
    year = max(calendars.get("cn").years()) + 1
    heard: list[dict[str, Any]] = []

    def listener(sender: Any, **kwargs: Any) -> None:
        heard.append(kwargs)

    signals.calendar_uncovered.connect(listener)
    try:
        # 4 January: a Monday in 2027, never a guessed working day.
        task = daily_report_from(make_task, date(year, 1, 4))
        assert each_day(date(year, 1, 4), date(year, 1, 4)) == 0
    finally:
        signals.calendar_uncovered.disconnect(listener)
    run = task.runs.get()
    assert (run.status, run.error_code) == ("skipped", "calendar_uncovered")
    assert str(year) in run.error_message
    assert [(h["calendar"], h["year"], h["rule"], h["task"].pk) for h in heard] == [
        ("cn", year, "skip", task.pk)
    ]
    assert outbox == []


def test_uncovered_year__under_the_weekdays_rule_is_sent_and_ops_are_told(make_task, outbox):
    year = max(calendars.get("cn").years()) + 1
    heard: list[dict[str, Any]] = []

    def listener(sender: Any, **kwargs: Any) -> None:
        heard.append(kwargs)

    signals.calendar_uncovered.connect(listener)
    try:
        task = daily_report_from(make_task, date(year, 1, 4))
        assert each_day(date(year, 1, 4), date(year, 1, 4)) == 1
    finally:
        signals.calendar_uncovered.disconnect(listener)
    run = task.runs.get()
    assert (run.status, run.day_source) == ("sent", "fallback")
    assert [(h["calendar"], h["year"], h["rule"]) for h in heard] == [("cn", year, "weekdays")]


def test_uncovered_year__the_signal_waits_for_the_commit(make_task):
    year = max(calendars.get("cn").years()) + 1
    heard: list[int] = []

    def listener(sender: object, **kw: object) -> None:
        heard.append(kw["year"])  # type: ignore[arg-type]

    signals.calendar_uncovered.connect(listener, weak=False)
    try:
        daily_report_from(make_task, date(year, 1, 4))
        with TestCase.captureOnCommitCallbacks(execute=False) as hooks:
            dispatch.materialize(now=nine_am(date(year, 1, 4)))
        assert heard == []
        assert len(hooks) == 1
    finally:
        signals.calendar_uncovered.disconnect(listener)


def test_check__warns_of_a_calendar_live_tasks_use_that_misses_the_current_year(
    make_task, settings
):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar"},
        "old": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [2020, 2025]},
        },
    }
    daily_report_from(make_task, date(2026, 10, 1), calendar="old")
    messages = check_calendars(databases=["default"], today=date(2026, 6, 1))
    assert [m.id for m in messages] == ["reminders.W005"]
    assert "'old'" in messages[0].msg
    assert "2026" in messages[0].msg


def test_check__from_december_warns_of_next_year_too(make_task, settings):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar"},
        "short": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [2026, 2026]},
        },
    }
    settings.REMINDERS_KINDS = {"follow_up": {"calendar": "short"}}
    assert _warned(check_calendars(databases=["default"], today=date(2026, 11, 30))) == set()
    december = check_calendars(databases=["default"], today=date(2026, 12, 1))
    assert "'short'" in " ".join(m.msg for m in december)
    assert "2027" in " ".join(m.msg for m in december)


def test_check__a_calendar_nothing_uses_is_not_warned_of(make_task, settings):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar"},
        "old": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [2020, 2025]},
        },
    }
    assert "old" not in _warned(check_calendars(databases=["default"], today=date(2026, 6, 1)))


def _warned(messages: list[Any]) -> set[str]:
    return {name for m in messages for name in ("cn", "old", "short") if f"'{name}'" in m.msg}
