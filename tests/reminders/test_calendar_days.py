"""Calendar days kept by ops: they decide over the package, a year nobody covers falls
back to a stated rule (Monday to Friday by default), every run says which source decided
its day, and the CSV import and the year's printout are what ops keep it current with.
All at clocks the tests set: 2027 is the first year chinesecalendar 1.11 does not cover."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from reminders import calendars
from reminders.calendars import days as calendar_days
from reminders.calendars.days import CalendarDay, CalendarYear
from reminders.checks import check_calendars, check_settings
from reminders.models import ScheduledTask
from reminders.schedule import timing
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

SHANGHAI = "Asia/Shanghai"
NOTICE = "国办发明电〔2026〕1号"  # noqa: RUF001 (the notice's own brackets)


def nine_am(day: date) -> datetime:
    return timing.localize(datetime.combine(day, time(9)), timing.zone(SHANGHAI))


def report_on(make_task: Any, day: date) -> ScheduledTask:
    """A daily report at 09:00 in Shanghai whose next occurrence is ``day``'s, run by a
    tick at 10:00 that day; returns the task."""
    task = make_task("daily_report", cron="0 9 * * *", tz=SHANGHAI)
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=nine_am(day))
    tick(now=nine_am(day) + timedelta(hours=1))
    return task


def enter(day: date, kind: str, note: str = NOTICE, calendar: str = "cn") -> CalendarDay:
    return CalendarDay.objects.create(calendar=calendar, day=day, kind=kind, note=note)


def test_uncovered_year__weekdays_rule_sends_monday_4_january_2027(make_task, outbox):
    assert not calendars.get("cn").covers(2027)
    run = report_on(make_task, date(2027, 1, 4)).runs.get()
    assert (run.status, run.error_code) == ("sent", "")
    assert run.day_source == "fallback"
    assert "weekdays" in run.day_note
    assert len(outbox) == 1


def test_uncovered_year__weekdays_rule_rests_on_saturday_saying_so(make_task, outbox):
    run = report_on(make_task, date(2027, 1, 9)).runs.get()
    assert (run.status, run.error_code) == ("skipped", "holiday")
    assert "fallback rule 'weekdays'" in run.error_message
    assert "2027" in run.error_message
    assert outbox == []


def test_uncovered_year__skip_rule_is_todays_behaviour(make_task, outbox, settings):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar", "UNCOVERED": "skip"}
    }
    run = report_on(make_task, date(2027, 1, 4)).runs.get()
    assert (run.status, run.error_code) == ("skipped", "calendar_uncovered")
    assert run.day_source == "fallback"
    assert outbox == []


def test_ops_rest_day__8_february_2027_skips_as_holiday_naming_its_source(make_task, outbox):
    enter(date(2027, 2, 8), "rest")
    run = report_on(make_task, date(2027, 2, 8)).runs.get()
    assert (run.status, run.error_code) == ("skipped", "holiday")
    assert NOTICE in run.error_message
    assert "ops entry" in run.error_message
    assert (run.day_source, run.day_note) == ("ops", NOTICE)
    assert outbox == []


def test_ops_working_saturday__sends(make_task, outbox):
    enter(date(2027, 2, 20), "working")
    run = report_on(make_task, date(2027, 2, 20)).runs.get()
    assert (run.status, run.day_source, run.day_note) == ("sent", "ops", NOTICE)
    assert len(outbox) == 1


def test_ops_entries__take_precedence_over_the_package(make_task, outbox):
    enter(date(2026, 11, 9), "rest", "company day off")  # an ordinary Monday
    enter(date(2026, 10, 5), "working", "company order")  # National Day week
    assert calendars.day_off("cn", date(2026, 11, 9)).code == "holiday"
    assert calendars.day_off("cn", date(2026, 10, 5)) is None
    run = report_on(make_task, date(2026, 11, 10)).runs.get()  # not entered: the package's
    assert (run.status, run.day_source) == ("sent", "package")
    assert "chinesecalendar" in run.day_note


def test_ops_entries__are_per_calendar(settings):
    settings.REMINDERS_CALENDARS = {
        "cn": "reminders.calendars.ChineseCalendar",
        "four": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [2026, 2026]},
        },
    }
    enter(date(2026, 11, 13), "working", "Friday on", calendar="four")
    assert calendars.day_off("four", date(2026, 11, 13)) is None
    assert calendars.day_off("cn", date(2026, 11, 14)).code == "holiday"  # a Saturday


def test_ops_edits__are_seen_by_the_next_plan_without_a_restart():
    assert calendars.day_off("cn", date(2027, 3, 1)) is None  # a Monday, by the fallback
    day = enter(date(2027, 3, 1), "rest")
    assert calendars.day_off("cn", date(2027, 3, 1)).code == "holiday"
    day.delete()
    assert calendars.day_off("cn", date(2027, 3, 1)) is None


def test_ops_entries__one_query_per_calendar_however_many_days(django_assert_max_num_queries):
    enter(date(2027, 2, 8), "rest")
    calendar_days.forget()
    with django_assert_max_num_queries(2):
        for n in range(400):
            calendars.decide("cn", date(2027, 1, 1) + timedelta(days=n))


def test_coverage__a_year_ops_entered_in_full_is_covered():
    assert calendars.covered_until("cn") == date(2026, 12, 31)
    CalendarYear.objects.create(calendar="cn", year=2027, note=NOTICE)
    assert calendars.covered_until("cn") == date(2027, 12, 31)
    decision = calendars.decide("cn", date(2027, 1, 4))
    assert (decision.working, decision.source) == (True, "ops")


def test_fallback_rule__anything_but_weekdays_or_skip_is_refused(settings):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar", "UNCOVERED": "guess"}
    }
    with pytest.raises(ImproperlyConfigured, match="UNCOVERED"):
        calendars.get("cn")
    errors = [m for m in check_settings() if m.id == "reminders.E010"]
    assert errors and "UNCOVERED" in errors[0].msg


def test_check__a_year_ops_entered_in_full_is_not_warned_of():
    [warning] = check_calendars(databases=["default"], today=date(2027, 6, 1))
    assert warning.id == "reminders.W005"
    assert "'weekdays'" in warning.msg and "reminders_calendar import" in warning.hint
    CalendarYear.objects.create(calendar="cn", year=2027, note=NOTICE)
    assert check_calendars(databases=["default"], today=date(2027, 6, 1)) == []


# The import and the printout ------------------------------------------------------

GOOD_2027 = (
    "date,kind,note\n"
    f"2027-02-06,rest,{NOTICE}\n"
    f"2027-02-07,rest,{NOTICE}\n"
    f"2027-02-08,rest,{NOTICE}\n"
    f"2027-02-20,working,{NOTICE}\n"
)


def write(tmp_path: Path, text: str, *, bom: bool = False) -> Path:
    path = tmp_path / "2027.csv"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return path


def test_import__saves_the_days_and_covers_the_year(tmp_path):
    out = StringIO()
    call_command(
        "reminders_calendar", "import", str(write(tmp_path, GOOD_2027, bom=True)), stdout=out
    )
    days = dict(CalendarDay.objects.filter(calendar="cn").values_list("day", "kind"))
    assert days == {
        date(2027, 2, 6): "rest",
        date(2027, 2, 7): "rest",
        date(2027, 2, 8): "rest",
        date(2027, 2, 20): "working",
    }
    assert CalendarYear.objects.filter(calendar="cn", year=2027).exists()
    assert "4" in out.getvalue()
    assert calendars.covered_until("cn") == date(2027, 12, 31)


def test_import__one_bad_row_imports_nothing_and_names_its_line(tmp_path):
    text = GOOD_2027 + "2027-02-31,rest,x\n2027-03-01,holiday,x\n"
    err = StringIO()
    with pytest.raises(CommandError, match="nothing was imported"):
        call_command("reminders_calendar", "import", str(write(tmp_path, text)), stderr=err)
    assert "line 6" in err.getvalue() and "date" in err.getvalue()
    assert "line 7" in err.getvalue() and "rest or working" in err.getvalue()
    assert not CalendarDay.objects.exists()
    assert not CalendarYear.objects.exists()


def test_import__a_date_given_twice_is_refused_naming_both_lines(tmp_path):
    text = GOOD_2027 + "2027-02-08,working,x\n"
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("reminders_calendar", "import", str(write(tmp_path, text)), stderr=err)
    assert "line 6" in err.getvalue() and "line 4" in err.getvalue()
    assert not CalendarDay.objects.exists()


def test_import__dry_run_checks_and_saves_nothing(tmp_path):
    out = StringIO()
    call_command(
        "reminders_calendar", "import", str(write(tmp_path, GOOD_2027)), "--dry-run", stdout=out
    )
    assert "Dry run" in out.getvalue()
    assert not CalendarDay.objects.exists()
    assert not CalendarYear.objects.exists()


def test_import__an_unknown_calendar_is_refused(tmp_path):
    with pytest.raises(CommandError, match="moon"):
        call_command(
            "reminders_calendar", "import", str(write(tmp_path, GOOD_2027)), "--calendar", "moon"
        )


def test_import__again_updates_the_days_it_names(tmp_path):
    call_command("reminders_calendar", "import", str(write(tmp_path, GOOD_2027)), stdout=StringIO())
    fixed = "2027-02-08,working,correction\n"
    call_command("reminders_calendar", "import", str(write(tmp_path, fixed)), stdout=StringIO())
    assert CalendarDay.objects.get(day=date(2027, 2, 8)).kind == "working"
    assert CalendarDay.objects.count() == 4


def test_show__prints_the_year_month_by_month_with_rest_days_marked(tmp_path):
    call_command("reminders_calendar", "import", str(write(tmp_path, GOOD_2027)), stdout=StringIO())
    out = StringIO()
    call_command("reminders_calendar", "show", "2027", stdout=out)
    text = out.getvalue()
    assert text.count("2027-") >= 12
    february = text[text.index("2027-02") : text.index("2027-03")]
    assert " 8*" in february  # Monday 8 February, a rest day
    assert " 9*" not in february and " 9 " in february
    assert "20+" in february  # a working Saturday
    assert NOTICE in february
    january = text[text.index("2027-01") : text.index("2027-02")]
    assert " 2*" in january and " 4 " in january  # Saturday rests, Monday works


def test_show__says_a_year_nobody_covers_falls_back():
    out = StringIO()
    call_command("reminders_calendar", "show", "2028", stdout=out)
    assert "not covered" in out.getvalue()
    assert "weekdays" in out.getvalue()
