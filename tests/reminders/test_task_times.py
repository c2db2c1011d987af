"""A task's times as the admin shows them: on the clock of the task's zone, month-day
and minutes, the zone named ("12-05 21:19 (Asia/Shanghai)"); never ISO, never UTC; and
its title human ("Follow-up reminder → demo-lisi · 12-05 21:19 (Asia/Shanghai)")."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse

from reminders import api
from reminders.engine import dispatch
from reminders.models import ScheduledTask
from reminders.schedule import readable

SHANGHAI = ZoneInfo("Asia/Shanghai")
# The demo's follow-up: 21:19 in Shanghai, 13:19:55 UTC.
AT = datetime(2026, 12, 5, 13, 19, 55, tzinfo=UTC)
NOW = datetime(2026, 12, 5, 20, 50, tzinfo=SHANGHAI)


@pytest.fixture
def at_dusk(time_machine) -> None:
    """Half an hour before the follow-up, in Shanghai."""
    time_machine.move_to(NOW, tick=False)


@pytest.fixture
def follow_up(db, at_dusk) -> ScheduledTask:
    """The demo's follow-up to demo-lisi, its run planned and waiting."""
    task = api.schedule("follow_up", "demo-lisi", at=AT, tz="Asia/Shanghai")
    dispatch.materialize()
    assert task.runs.get().status == "scheduled"
    task.refresh_from_db()
    return task


def page(admin_client, task: ScheduledTask) -> str:
    url = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    return admin_client.get(url).content.decode()


@pytest.mark.usefixtures("at_dusk")
@pytest.mark.parametrize(
    ("moment", "zone", "expected"),
    [
        (AT, "Asia/Shanghai", "12-05 21:19 (Asia/Shanghai)"),
        (AT, "America/New_York", "12-05 08:19 (America/New_York)"),
        (
            datetime(2027, 1, 9, 7, 30, tzinfo=UTC),
            "Asia/Shanghai",
            "2027-01-09 15:30 (Asia/Shanghai)",
        ),
        (AT, "Not/AZone", "12-05 13:19 (UTC)"),
    ],
)
def test_readable_moment__month_day_and_minutes_on_the_zone_s_clock_the_zone_named(
    moment, zone, expected
):
    assert readable.moment(moment, zone) == expected


def test_task_title__kind_recipient_and_local_time_the_zone_named(follow_up):
    assert str(follow_up) == "Follow-up reminder → demo-lisi · 12-05 21:19 (Asia/Shanghai)"


@pytest.mark.usefixtures("at_dusk")
def test_schedule_display__a_one_shot_on_its_zone_s_clock_the_zone_named(db):
    task = api.schedule("follow_up", "demo-lisi", at=AT, tz="America/New_York")
    assert task.schedule_display == "12-05 08:19 (America/New_York)"


def test_task_changelist__a_one_shot_s_schedule_names_its_zone(admin_client, follow_up):
    html = admin_client.get(reverse("admin:reminders_scheduledtask_changelist")).content.decode()
    assert '<td class="field-schedule">12-05 21:19 (Asia/Shanghai)</td>' in html


def test_task_change_form__its_title_names_the_zone_of_its_time(admin_client, follow_up):
    html = page(admin_client, follow_up)
    assert "<title>Follow-up reminder → demo-lisi · 12-05 21:19 (Asia/Shanghai) |" in html


@pytest.mark.usefixtures("at_dusk")
def test_task_title__a_cron_schedule_in_words(db):
    task = api.schedule("daily_report", "demo-zhangsan", cron="0 9 * * 1-5")
    assert str(task) == "Daily report → demo-zhangsan · At 09:00 on Monday to Friday"


def test_task_change_form__times_in_the_task_s_zone_never_iso_utc(admin_client, follow_up):
    html = page(admin_client, follow_up)
    assert "12-05 21:19 (Asia/Shanghai)" in html
    assert "+00:00" not in html
    assert "2026-12-05T13:19" not in html


def test_task_changelist__next_run_in_the_task_s_zone(admin_client, follow_up):
    html = admin_client.get(reverse("admin:reminders_scheduledtask_changelist")).content.decode()
    assert '<td class="field-next_send">12-05 21:19 (Asia/Shanghai)</td>' in html


def test_task_change_form__lists_its_waiting_run_and_says_none_went_yet(admin_client, follow_up):
    html = page(admin_client, follow_up)
    run = follow_up.runs.get()
    assert reverse("admin:reminders_taskrun_change", args=[run.pk]) in html
    assert "None yet." not in html
    assert "Not yet: 1 run waits." in html


def readonly(html: str, name: str) -> str:
    """A read-only field's text on a change form."""
    found = re.search(rf'field-{name}">.*?<div class="readonly">(.*?)</div>', html, re.S)
    assert found, name
    return found.group(1).strip()


def test_task_change_form__created_updated_and_error_since_in_the_task_s_zone(
    admin_client, follow_up
):
    follow_up.mark_error("unknown_kind", "Gone.")
    html = page(admin_client, follow_up)
    for name in ("created_at", "updated_at", "error_at"):
        local = readable.moment(getattr(follow_up, name), "Asia/Shanghai")
        assert readonly(html, f"{name}_local") == local


def test_run_title__its_task_s_kind_and_recipient_and_its_occurrence_in_the_task_s_zone(
    follow_up,
):
    assert str(follow_up.runs.get()) == "Follow-up reminder → demo-lisi · 12-05 21:19"
