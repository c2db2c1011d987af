"""The dashboard's first screen (``ops.dashboard_health``): each part well or wrong as
its numbers say, and its link leading where the thing is acted on, at clocks the tests
set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import override_settings
from django.urls import reverse

from ops.models import Alert, AlertDelivery
from reminders.calendars.days import CalendarYear
from reminders.models import SchedulerHeartbeat, TaskRun

from .stats_world import DAY, build

pytestmark = pytest.mark.django_db

PAGE = reverse("ops_dashboard:dashboard")
# 2026-03-10 15:00 in Shanghai: the stats world's "now".
NOW = datetime(2026, 3, 10, 7, 0, tzinfo=UTC)


def health(client: Any, **query: str) -> dict[str, Any]:
    response = client.get(PAGE, query)
    assert response.status_code == 200
    return {part.key: part for part in response.context["health"]}


def test_the_five_parts_come_first_in_the_page(admin_client, time_machine):
    time_machine.move_to(NOW)
    response = admin_client.get(PAGE)
    html = response.content.decode()
    assert [part.key for part in response.context["health"]] == [
        "failures",
        "schedulers",
        "calendars",
        "quota",
        "alerts",
    ]
    # The first screen: before the day's numbers and every other section.
    assert html.index('id="ops-health"') < html.index('id="ops-day"') < html.index('id="ops-rates"')


def test_failures__the_day_s_failed_expired_and_in_doubt_runs_linked(admin_client, time_machine):
    time_machine.move_to(NOW)
    build(heartbeats=False)
    part = health(admin_client, date=DAY.isoformat())["failures"]
    # Two failed and one expired (#5, #6, #14), one in doubt (#7): stats_world.
    assert (part.ok, part.value, part.detail) == (False, "3", "failed or expired; 1 in doubt")
    query = parse_qs(urlsplit(part.link).query)
    assert query["status__in"] == ["failed,unknown,expired"]
    listed = admin_client.get(part.link)
    assert listed.status_code == 200
    shown = {run.pk for run in listed.context["cl"].result_list}
    # The day in Shanghai: from 2026-03-09 16:00 UTC to 2026-03-10 16:00 UTC.
    start = datetime(2026, 3, 9, 16, tzinfo=UTC)
    expected = TaskRun.objects.filter(
        status__in=["failed", "expired", "unknown"],
        due_at__gte=start,
        due_at__lt=start + timedelta(days=1),
    )
    assert shown == set(expected.values_list("pk", flat=True))
    assert len(shown) == 4


def test_failures__a_quiet_day_is_well_and_links_nowhere(admin_client, time_machine):
    time_machine.move_to(NOW)
    part = health(admin_client)["failures"]
    assert (part.ok, part.value, part.link) == (True, "0", None)


def test_schedulers__none_running_is_wrong_a_fresh_one_well_a_stale_one_wrong(
    admin_client, time_machine
):
    time_machine.move_to(NOW)
    part = health(admin_client)["schedulers"]
    assert (part.ok, part.value, part.detail) == (False, "0", "none is running")
    SchedulerHeartbeat.objects.beat("a:1", host="alpha", pid=1, started_at=NOW, now=NOW)
    part = health(admin_client)["schedulers"]
    assert (part.ok, part.value, part.detail, part.link) == (
        True,
        "1",
        "0 stale",
        "#ops-schedulers",
    )
    old = NOW - timedelta(minutes=10)
    SchedulerHeartbeat.objects.beat("b:2", host="beta", pid=2, started_at=old, now=old)
    part = health(admin_client)["schedulers"]
    assert (part.ok, part.value, part.detail) == (False, "1", "1 stale")


def test_calendars__wrong_from_60_days_before_coverage_ends_until_next_year_is_in(
    admin_client, time_machine, settings
):
    settings.REMINDERS_CALENDAR_WARN_DAYS = 60
    # The Chinese calendar is covered to 2026-12-31 by its package (tests' settings).
    time_machine.move_to(datetime(2026, 10, 31, 12, tzinfo=UTC))  # 61 days left
    part = health(admin_client)["calendars"]
    assert (part.ok, part.value, part.link) == (True, "2026-12-31", None)
    time_machine.move_to(datetime(2026, 11, 2, 12, tzinfo=UTC))  # 59 days left
    part = health(admin_client)["calendars"]
    assert (part.ok, part.value) == (False, "2026-12-31")
    assert "import 2027" in part.detail
    assert part.link == reverse("admin:reminders_calendarday_changelist")
    CalendarYear.objects.create(calendar="cn", year=2027, note="the notice")
    part = health(admin_client)["calendars"]
    assert (part.ok, part.value) == (True, "2027-12-31")


def test_quota__unknown_without_seats_then_judged_by_the_forecast(
    admin_client, time_machine, settings
):
    time_machine.move_to(NOW)
    part = health(admin_client)["quota"]
    assert (part.ok, part.unknown, part.detail) == (True, True, "set OPS_WECOM_SEATS")
    settings.OPS_WECOM_SEATS = 1
    part = health(admin_client)["quota"]
    assert (part.ok, part.unknown, part.value, part.link) == (True, False, "0 / 200", "#ops-wave")


def test_alerts__the_last_24_hours_and_those_not_delivered(admin_client, time_machine):
    time_machine.move_to(NOW)
    part = health(admin_client)["alerts"]
    assert (part.ok, part.value, part.link) == (True, "0", None)
    old = Alert.objects.create(
        group_key="g", seq=1, type="run_failed", created_at=NOW - timedelta(hours=25)
    )
    AlertDelivery.objects.create(alert=old, channel="admins", status="failed")
    recent = Alert.objects.create(
        group_key="g", seq=2, type="run_failed", created_at=NOW - timedelta(hours=1)
    )
    AlertDelivery.objects.create(alert=recent, channel="admins", status="failed")
    AlertDelivery.objects.create(alert=recent, channel="robot", status="sent")
    part = health(admin_client)["alerts"]
    assert (part.ok, part.value, part.detail) == (False, "1", "1 not delivered")
    listed = admin_client.get(part.link)
    assert listed.status_code == 200
    assert [alert.pk for alert in listed.context["cl"].result_list] == [recent.pk]


def test_alerts__the_morning_summary_is_no_problem(admin_client, time_machine):
    time_machine.move_to(NOW)
    Alert.objects.create(
        group_key="daily_summary", seq=1, type="daily_summary", created_at=NOW - timedelta(hours=1)
    )
    part = health(admin_client)["alerts"]
    assert (part.ok, part.value) == (True, "0")


def test_a_part_links_only_where_the_user_may_go(client, time_machine, django_user_model):
    """A viewer of runs who may not see alerts gets the count, without the link."""
    from django.contrib.auth.models import Permission

    time_machine.move_to(NOW)
    Alert.objects.create(group_key="g", seq=1, type="run_failed", created_at=NOW)
    person = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    person.user_permissions.add(Permission.objects.get(codename="view_taskrun"))
    client.force_login(person)
    part = health(client)["alerts"]
    assert (part.ok, part.value, part.link) == (False, "1", None)


@override_settings(WECOM_RATE_LIMIT=2)
def test_wave__the_wecom_app_s_pace_is_a_line(admin_client, time_machine, settings):
    time_machine.move_to(NOW)
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"},
        "wecom_alias": {"BACKEND": "reminders.senders.wecom.WeComSender"},
    }
    for name, value in {
        "WECOM_CORP_ID": "corp",
        "WECOM_CORP_SECRET": "secret",
        "WECOM_AGENT_ID": "1000002",
    }.items():
        setattr(settings, name, value)
    html = admin_client.get(PAGE).content.decode()
    # One line for the one app both channels send as: 2 a second is 120 a minute.
    assert html.count('<line class="limit"') == 1
    assert "wecom, wecom_alias: 120 a minute" in html


def test_wave__no_line_for_an_app_with_no_pace(admin_client, time_machine, settings):
    time_machine.move_to(NOW)
    settings.WECOM_RATE_LIMIT = 0
    html = admin_client.get(PAGE).content.decode()
    assert '<line class="limit"' not in html


def test_the_explanations_are_collapsed_help(admin_client, time_machine):
    time_machine.move_to(NOW)
    html = admin_client.get(PAGE).content.decode()
    section = html[html.index('id="ops-day"') : html.index('id="ops-rates"')]
    assert '<details class="help">' in section
    # No explanation stands between the numbers outside a collapsed help.
    outside = section.replace(section[section.index('<details class="help">') :], "")
    assert '<p class="note">' not in outside


def test_the_alerts_list_needs_no_time_zone_tables(admin_client, time_machine):
    """The list the alerts part leads to filters by a date range: on MySQL or MariaDB
    without time zone tables it still answers (a ``date_hierarchy`` would not)."""
    time_machine.move_to(NOW)
    Alert.objects.create(group_key="g", seq=1, type="run_failed", created_at=NOW)
    response = admin_client.get(reverse("admin:ops_alert_changelist"))
    assert response.status_code == 200
    assert response.context["cl"].result_count == 1
