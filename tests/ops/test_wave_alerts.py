"""Tomorrow's planned volume over WeCom's daily quota: the deploy check (ops.W003) and
the alert step's event, once a Beijing day, counting the WeCom app channels only, as
the dashboard does; nothing without OPS_WECOM_SEATS."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.utils import timezone

from ops import alerts, checks
from ops.conf import settings as conf
from ops.models import AlertEvent
from reminders.models import TaskRun

from .test_wave import NOW, Builder, at

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy_tomorrow(app_channels: tuple[str, ...]) -> Builder:
    """201 runs of a one-off task planned tomorrow on the WeCom app channel: over one
    seat's 200."""
    b = Builder()
    once = b.task("birthday", "erin", cron="")
    b.runs(once, at(9, days=1), n=201)
    return b


@pytest.fixture
def frozen(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@override_settings(OPS_WECOM_SEATS=1)
def test_the_alert_step_records_tomorrow_over_the_quota_once(busy_tomorrow):
    assert alerts.check_daily_quota(NOW) == 1
    assert alerts.check_daily_quota(NOW + timedelta(minutes=5)) == 0
    event = AlertEvent.objects.get(type="daily_quota")
    assert event.data == {
        "day": "2026-03-11",
        "tomorrow": 201,
        "planned": 201,
        "estimated": 0,
        "quota": 200,
        "seats": 1,
        "channels": ["wecom"],
    }
    assert "over WeCom's daily quota of 200" in event.message
    assert "Tomorrow (2026-03-11, Beijing time) 201 WeCom app messages" in event.message


@override_settings(OPS_WECOM_SEATS=1, TIME_ZONE="Pacific/Honolulu")
def test_the_alert_step_names_beijings_tomorrow(busy_tomorrow):
    """At 21:00 on the 9th in Honolulu it is the 10th in Beijing: tomorrow is the 11th."""
    assert alerts.check_daily_quota(NOW) == 1
    assert AlertEvent.objects.get(type="daily_quota").data["day"] == "2026-03-11"


@override_settings(OPS_WECOM_SEATS=1)
def test_a_group_robots_runs_spend_no_quota(busy_tomorrow, frozen):
    """The same 201 runs on a group robot (or any channel but a WeCom app's): nothing to
    warn of, and nothing to alert."""
    TaskRun.objects.update(task=busy_tomorrow.task("birthday", "erin", cron="", channel="robot"))
    assert alerts.check_daily_quota(NOW) == 0
    assert checks.check_daily_quota() == []


@override_settings(OPS_WECOM_SEATS=2)
def test_no_alert_within_the_quota(busy_tomorrow):
    assert alerts.check_daily_quota(NOW) == 0


def test_no_alert_without_seats(busy_tomorrow):
    assert alerts.check_daily_quota(NOW) == 0


@override_settings(OPS_WECOM_SEATS=1)
def test_the_alert_opens_with_its_words(busy_tomorrow):
    alerts.check_daily_quota(NOW)
    opened = alerts.open_alerts(NOW + timedelta(seconds=1))
    assert len(opened) == 1
    assert "exceed WeCom's daily quota" in opened[0].title


@override_settings(OPS_WECOM_SEATS=1)
def test_deploy_check_warns(busy_tomorrow, frozen):
    found = checks.check_daily_quota()
    assert [m.id for m in found] == ["ops.W003"]
    assert "201" in found[0].msg and "200" in found[0].msg
    assert "2026-03-11, Beijing time" in found[0].msg


def test_deploy_check_is_quiet_without_seats_or_within_the_quota(busy_tomorrow, frozen):
    assert checks.check_daily_quota() == []
    with override_settings(OPS_WECOM_SEATS=2):
        assert checks.check_daily_quota() == []


@pytest.mark.parametrize("bad", [0, -3, 1.5, "many", True])
def test_seats_must_be_a_whole_positive_number(bad):
    with override_settings(OPS_WECOM_SEATS=bad), pytest.raises(ImproperlyConfigured):
        conf.SEATS  # noqa: B018


def test_seats_read_from_the_environment_as_text():
    with override_settings(OPS_WECOM_SEATS="12"):
        assert conf.SEATS == 12
    with override_settings(OPS_WECOM_SEATS=None):
        assert conf.SEATS is None
