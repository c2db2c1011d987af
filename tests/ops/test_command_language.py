"""The ops commands and /healthz speak the active language (a command's: LANGUAGE_CODE;
a request's: the browser's, else LANGUAGE_CODE): Simplified Chinese or English. What
machines read (the JSON's names and statuses, WECOM_API_BASE=) stays as it is."""

# ruff: noqa: RUF001

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command, load_command_class
from django.utils import timezone, translation

from ops.models import AlertEvent
from ops.roles import VIEWER
from reminders.models import SchedulerHeartbeat

pytestmark = pytest.mark.django_db


def help_of(command: str, app: str = "ops") -> str:
    return load_command_class(app, command).create_parser("manage.py", command).format_help()


@pytest.mark.parametrize(
    ("command", "app", "chinese", "english"),
    [
        ("reminders_stats", "ops", "打印某一天的提醒统计", "Print a day's reminders numbers"),
        ("ops_alerts", "ops", "每隔一段时间执行一步。", "Run a step every interval."),
        (
            "wecom_sandbox",
            "wecom_sandbox",
            "0 表示自动选择空闲端口（默认：8900）",
            "(default: 8900)",
        ),
        ("run_reminders", "reminders", "启动时不运行系统检查（默认：False）", "(default: False)"),
        ("reminders_import", "reminders", "所有任务的类型。", "The kind of every task."),
    ],
)
def test_help_in_either_language(command, app, chinese, english):
    with translation.override("zh-hans"):
        assert chinese in help_of(command, app)
    with translation.override("en"):
        assert english in help_of(command, app)


def test_a_bad_option_value_is_refused_in_chinese():
    with translation.override("zh-hans"), pytest.raises(CommandError, match="不是有效日期"):
        call_command("reminders_stats", "--date", "10/03/2026", stdout=StringIO())


def test_ops_roles_in_chinese():
    out = StringIO()
    with translation.override("zh-hans"):
        call_command("ops_roles", stdout=out)
    assert f"运维查看者（{VIEWER}）：" in out.getvalue()
    assert "项权限" in out.getvalue()


def test_ops_alerts_in_chinese(admins, mailoutbox, now):
    AlertEvent.objects.record("run_stuck", occurred_at=now - timedelta(seconds=1), kind="k")
    out = StringIO()
    with translation.override("zh-hans"):
        call_command("ops_alerts", stdout=out)
    assert "新建 1 条告警，发出 1 次投递，0 次失败" in out.getvalue()


def test_healthz_reasons_in_the_browsers_language_names_and_statuses_as_they_are(client):
    at = timezone.now() - timedelta(seconds=3)
    SchedulerHeartbeat.objects.beat("host:1", host="host", pid=1, started_at=at, now=at)

    body = client.get("/healthz", headers={"accept-language": "zh-hans"}).json()

    assert body["status"] == "ok"
    assert body["checks"]["database"] == {"status": "ok", "reason": "可以连接"}
    assert body["checks"]["scheduler"]["reason"].startswith("最近心跳在 ")
    assert body["checks"]["cluster"] == {"status": "ok", "reason": "排队的作业正在被处理"}
