"""System-check messages, and the settings errors they repeat, are written in the
language active when the checks run (a command's: LANGUAGE_CODE), Simplified Chinese or
English; an error found before the apps are loaded is said in English."""

# ruff: noqa: RUF001

from __future__ import annotations

from io import StringIO

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.utils import translation

from reminders.checks import check_calendars, check_kinds, check_settings, check_worker
from reminders.conf import settings as conf
from reminders.schedule.policies import Policy, PolicyError


def only(messages, wanted: str):  # type: ignore[no-untyped-def]
    [message] = [m for m in messages if m.id == wanted]
    return message


def test_a_check_message_and_its_hint_in_either_language(settings):
    settings.REMINDERS_DEFAULT_CHANNEL = "fax"

    with translation.override("zh-hans"):
        chinese = only(check_settings(), "reminders.E003")
    with translation.override("en"):
        english = only(check_settings(), "reminders.E003")

    assert chinese.msg == "REMINDERS_DEFAULT_CHANNEL 'fax' 不在 REMINDERS_CHANNELS 中。"
    assert chinese.hint.startswith("请使用以下之一：memory, memory_dedup")
    assert english.msg == "REMINDERS_DEFAULT_CHANNEL 'fax' is not in REMINDERS_CHANNELS."
    assert english.hint.startswith("Use one of: memory, memory_dedup")


def test_a_worker_check_in_chinese(settings):
    settings.REMINDERS_CLUSTER = {**settings.REMINDERS_CLUSTER, "timeout": 100, "retry": 100}

    with translation.override("zh-hans"):
        message = only(check_worker(), "reminders.E008")

    assert message.msg.startswith("REMINDERS_CLUSTER['retry']（100）必须大于其 timeout（100）")
    assert message.hint == "不设置此项（默认为 REMINDERS_LEASE_SECONDS 再加一分钟）。"


@pytest.mark.django_db
def test_kinds_of_live_tasks_counted_in_chinese(make_task):
    from reminders.models import ScheduledTask

    tasks = [make_task(cron="0 9 * * *") for _ in range(3)]
    ScheduledTask.objects.filter(pk__in=[tasks[0].pk, tasks[1].pk]).update(kind="crm_only")
    ScheduledTask.objects.filter(pk=tasks[2].pk).update(kind="one_off")

    with translation.override("zh-hans"):
        [message] = check_kinds(databases=["default"])

    assert "本进程未注册的类型：'crm_only'（2 个任务）, 'one_off'（1 个任务）。" in message.msg
    assert message.hint.startswith("CRM 应在其 AppConfig.ready() 中")


@pytest.mark.django_db
def test_an_uncovered_calendar_year_in_chinese(settings):
    from datetime import date

    with translation.override("zh-hans"):
        messages = check_calendars(databases=["default"], today=date(2099, 12, 1))

    message = only(messages, "reminders.W005")
    assert message.msg.startswith("工作日日历 'cn' 未覆盖 2099 和 2100：")
    with translation.override("en"):
        message = only(
            check_calendars(databases=["default"], today=date(2099, 12, 1)), "reminders.W005"
        )
    assert message.msg.startswith("Working-day calendar 'cn' does not cover 2099 and 2100:")


def test_a_settings_error_is_translated_where_it_is_raised(settings):
    settings.REMINDERS_LEASE_SECONDS = "0"

    with translation.override("zh-hans"), pytest.raises(ImproperlyConfigured) as raised:
        _ = conf.LEASE_SECONDS
    assert str(raised.value) == "REMINDERS_LEASE_SECONDS 必须大于 0，实际为 '0'。"

    with translation.override("zh-hans"):
        message = only(check_settings(), "reminders.E004")
    assert message.msg == "REMINDERS_LEASE_SECONDS 必须大于 0，实际为 '0'。"


def test_a_kind_override_error_in_chinese(settings):
    settings.REMINDERS_KINDS = {"daily_report": {"jitter_seconds": -1}}

    with translation.override("zh-hans"):
        message = only(check_settings(), "reminders.E009")

    assert message.msg == (
        "REMINDERS_KINDS['daily_report']：jitter_seconds 必须是不小于 0 的整数，而不是 -1。"
    )


def test_before_the_apps_are_loaded_an_error_is_said_in_english(monkeypatch):
    with translation.override("zh-hans"):
        with pytest.raises(PolicyError, match="必须是"):
            Policy(priority="urgent")
        # As while a CRM's kinds are imported: gettext could not read the catalogs yet.
        monkeypatch.setattr(apps, "apps_ready", False)
        with pytest.raises(PolicyError) as raised:
            Policy(priority="urgent")

    assert str(raised.value) == "priority must be one of high, normal, low, not 'urgent'."


def test_the_check_command_speaks_the_active_language(settings):
    settings.REMINDERS_DEFAULT_CHANNEL = "fax"

    with translation.override("zh-hans"), pytest.raises(SystemCheckError) as raised:
        call_command("check", stdout=StringIO(), stderr=StringIO())

    assert "reminders.E003" in str(raised.value)
    assert "REMINDERS_DEFAULT_CHANNEL 'fax' 不在 REMINDERS_CHANNELS 中。" in str(raised.value)
