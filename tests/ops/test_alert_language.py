"""Alerts are written in OPS_ALERT_LANGUAGE, else LANGUAGE_CODE: Simplified Chinese or
English, fixed when the alert is opened."""

# ruff: noqa: RUF001

from __future__ import annotations

import pytest
from django.contrib import admin
from django.utils import translation

from ops.models import Alert
from reminders.exceptions import PermanentSendError
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db


def fail_one(make_task) -> None:  # type: ignore[no-untyped-def]
    make_task("follow_up", payload={"content": "Call ACME"})
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")]
    tick()


def test_an_alert_is_in_chinese_by_the_language_code(
    make_task, admins, clock, mailoutbox, settings
):
    settings.LANGUAGE_CODE = "zh-hans"
    fail_one(make_task)

    [alert] = clock.step().opened

    assert alert.title == "[reminders] 跟进提醒 在渠道 memory 上有 1 条运行记录发送失败"
    assert alert.body.startswith("重试次数已用完，或重试也无济于事。")
    assert "按错误代码：81013: 1" in alert.body
    assert "最早的事件：" in alert.body
    assert "- 运行记录 " in alert.body
    assert mailoutbox[0].subject.endswith(alert.title)


def test_ops_alert_language_wins_over_the_language_code(make_task, admins, clock, settings):
    settings.LANGUAGE_CODE = "zh-hans"
    settings.OPS_ALERT_LANGUAGE = "en"
    fail_one(make_task)

    [alert] = clock.step().opened

    assert alert.title == "[reminders] 1 run of Follow-up reminder failed on channel memory"
    assert "First events:" in alert.body


def test_every_alert_type_has_chinese_words():
    from django.utils import translation

    from ops.alert_texts import _advice, _titles

    with translation.override("zh-hans"):
        titles = {
            t: words(2, {"kind": "k", "channel": "c", "scope": "cn 2031"})
            for t, words in _titles().items()
        }
        advice = _advice()
    for text in [*titles.values(), *advice.values()]:
        assert any("\u4e00" <= char <= "\u9fff" for char in text), text
    assert all("2" in title for title in titles.values())


def test_the_settings_checks_speak_the_active_language(settings):
    from django.utils import translation

    from ops import checks

    settings.OPS_ALERT_CHANNELS = {}
    with translation.override("zh-hans"):
        [chinese] = checks.check_settings()
    with translation.override("en"):
        [english] = checks.check_settings()

    assert (chinese.id, chinese.msg) == (
        "ops.W001",
        "OPS_ALERT_CHANNELS 为空：告警只会被记录，不会通知任何人。",
    )
    assert english.msg == "OPS_ALERT_CHANNELS is empty: alerts are recorded, and nobody is told."

    settings.OPS_ALERT_CHANNELS = {
        "app": {"BACKEND": "ops.alert_channels.ReminderChannel", "OPTIONS": {"channel": "memory"}}
    }
    settings.OPS_ALERT_WINDOW_SECONDS = 0
    with translation.override("zh-hans"):
        found = {message.id: message.msg for message in checks.check_settings()}

    assert found == {
        "ops.E001": "OPS_ALERT_WINDOW_SECONDS 必须大于 0，实际为 0。",
        "ops.W002": "OPS_ALERT_CHANNELS['app']：渠道 'memory' 不是群机器人："
        "OPTIONS 需要指定 'recipient'。",
    }


def test_the_alert_list_names_the_kind_by_its_label(make_task, admins, clock):
    # The column itself: the list's date hierarchy needs MariaDB's time zone tables.
    fail_one(make_task)
    [alert] = clock.step().opened
    alerts = admin.site._registry[Alert]

    assert alert.kind == "follow_up" and "kind_label" in alerts.list_display
    assert alerts.kind_label(alert) == "Follow-up reminder"
    with translation.override("zh-hans"):
        assert alerts.kind_label(alert) == "跟进提醒"
