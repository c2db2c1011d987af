"""Calendar days in the admin: the operator enters them (one by one, or a range), the
viewer only looks; the run page says what decided a run's day; the task pages warn while
a calendar in use is running out."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.urls import reverse
from django.utils import timezone

from ops.roles import OPERATOR, VIEWER
from reminders.calendars.days import CalendarDay, CalendarYear
from reminders.models import ScheduledTask
from reminders.schedule import timing
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

DAYS = reverse("admin:reminders_calendarday_changelist")
ADD_DAY = reverse("admin:reminders_calendarday_add")
RANGE = reverse("admin:reminders_calendarday_range")
ADD_YEAR = reverse("admin:reminders_calendaryear_add")
TASKS = reverse("admin:reminders_scheduledtask_changelist")
NOTICE = "State Council notice 2026-1"


@pytest.fixture
def login(client, django_user_model):
    def log_in(role: str):
        user = django_user_model.objects.create_user(
            role, is_staff=True, is_superuser=role == "superuser"
        )
        group = {"operator": OPERATOR, "viewer": VIEWER}.get(role)
        if group:
            user.groups.add(Group.objects.get(name=group))
        client.force_login(user)
        return client

    return log_in


def holiday_week(**extra):
    return {
        "calendar": "cn",
        "first": "2027-02-06",
        "last": "2027-02-13",
        "kind": "rest",
        "note": NOTICE,
        **extra,
    }


def test_viewer__sees_the_days_and_cannot_edit_them(login):
    day = CalendarDay.objects.create(calendar="cn", day=date(2027, 2, 8), kind="rest", note="x")
    client = login("viewer")
    assert client.get(DAYS).status_code == 200
    assert b"Enter a range" not in client.get(DAYS).content
    assert client.get(ADD_DAY).status_code == 403
    assert client.get(RANGE).status_code == 403
    assert client.post(RANGE, holiday_week()).status_code == 403
    page = reverse("admin:reminders_calendarday_change", args=[day.pk])
    client.post(page, {"calendar": "cn", "day": "2027-02-08", "kind": "working", "note": "y"})
    assert client.post(ADD_YEAR, {"calendar": "cn", "year": "2027", "note": "y"}).status_code == 403
    delete = reverse("admin:reminders_calendarday_delete", args=[day.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    day.refresh_from_db()
    assert (day.kind, day.note) == ("rest", "x")
    assert CalendarDay.objects.count() == 1
    assert not CalendarYear.objects.exists()


def test_operator__enters_a_holiday_week_as_one_range(login):
    client = login("operator")
    assert b"Enter a range" in client.get(DAYS).content
    response = client.post(RANGE, holiday_week())
    assert response.status_code == 302
    rows = CalendarDay.objects.order_by("day")
    assert [row.day for row in rows] == [date(2027, 2, 6) + timedelta(days=n) for n in range(8)]
    assert {(row.kind, row.note, row.changed_by) for row in rows} == {("rest", NOTICE, "operator")}
    assert not CalendarYear.objects.exists()  # one range is not the whole notice


def test_operator__the_last_range_may_complete_the_year(login):
    client = login("operator")
    client.post(
        RANGE, holiday_week(first="2027-02-20", last="2027-02-20", kind="working", complete="on")
    )
    year = CalendarYear.objects.get()
    assert (year.calendar, year.year, year.note, year.changed_by) == (
        "cn",
        2027,
        NOTICE,
        "operator",
    )


def test_range__refuses_a_range_backwards_and_saves_nothing(login):
    client = login("operator")
    response = client.post(RANGE, holiday_week(first="2027-02-13", last="2027-02-06"))
    assert response.status_code == 200
    assert "The range ends before it starts." in response.content.decode()
    assert not CalendarDay.objects.exists()


def test_operator__adds_one_day_and_is_recorded_as_its_author(login):
    client = login("operator")
    response = client.post(
        ADD_DAY, {"calendar": "cn", "day": "2027-02-20", "kind": "working", "note": NOTICE}
    )
    assert response.status_code == 302
    day = CalendarDay.objects.get()
    assert (day.kind, day.changed_by) == ("working", "operator")


def test_a_day_given_twice_is_refused_by_the_form(login):
    CalendarDay.objects.create(calendar="cn", day=date(2027, 2, 8), kind="rest", note="x")
    response = login("operator").post(
        ADD_DAY, {"calendar": "cn", "day": "2027-02-08", "kind": "working", "note": "y"}
    )
    assert response.status_code == 200
    assert CalendarDay.objects.get().kind == "rest"


def test_run_page__says_what_decided_its_day(login, make_task):
    CalendarDay.objects.create(calendar="cn", day=date(2027, 2, 8), kind="rest", note=NOTICE)
    task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
    nine = timing.localize(
        datetime.combine(date(2027, 2, 8), time(9)), timing.zone("Asia/Shanghai")
    )
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=nine)
    tick(now=nine + timedelta(hours=1))
    run = task.runs.get()
    page = login("viewer").get(reverse("admin:reminders_taskrun_change", args=[run.pk]))
    text = page.content.decode()
    assert "Day decided by" in text and "ops entry" in text
    assert NOTICE in text


def test_task_pages__warn_while_a_calendar_in_use_runs_out(login, make_task, settings):
    settings.REMINDERS_CALENDAR_WARN_DAYS = 60
    this_year = timezone.localdate().year
    settings.REMINDERS_CALENDARS = {
        "cn": "reminders.calendars.ChineseCalendar",
        "old": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [this_year - 2, this_year - 1]},
        },
        "long": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [this_year - 1, this_year + 5]},
        },
    }
    settings.REMINDERS_KINDS = {
        "daily_report": {"calendar": "long"},
        "weekly_report": {"calendar": "long"},
    }
    task = make_task("follow_up", cron="0 9 * * *")
    client = login("viewer")
    change = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    assert "reminders-calendar-banner" not in client.get(TASKS).content.decode()
    ScheduledTask.objects.filter(pk=task.pk).update(calendar="old")
    for page in (TASKS, change, reverse("ops_dashboard:dashboard")):
        text = client.get(page).content.decode()
        assert "reminders-calendar-banner" in text, page
        assert "Working-day calendar old is not covered since" in text
        assert "calendar long" not in text


def test_range__needs_the_view_permission_as_well_as_the_edit_one(client, django_user_model):
    user = django_user_model.objects.create_user("editor", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="edit_calendarday"))
    client.force_login(user)
    assert client.get(RANGE).status_code == 403
    assert client.post(RANGE, holiday_week(complete="on")).status_code == 403
    assert not CalendarDay.objects.exists()
    assert not CalendarYear.objects.exists()
