"""The admin speaks Simplified Chinese or English: LANGUAGE_CODE (from the environment in
the standalone settings, zh-hans by default) unless the browser asks for a language of
LANGUAGES; the suite and the processes it starts stay in English."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from reminders.models import ScheduledTask, TaskRun
from tests.support.jobs import tick
from tests.support.processes import REPO

pytestmark = pytest.mark.django_db


def test_admin__changelists_of_tasks_and_runs_are_in_chinese_by_the_language_code(
    admin_client, make_task, settings
):
    settings.LANGUAGE_CODE = "zh-hans"
    make_task(recipient="alice")
    tick()

    tasks = admin_client.get(reverse("admin:reminders_scheduledtask_changelist"))
    runs = admin_client.get(reverse("admin:reminders_taskrun_changelist"))

    assert tasks.status_code == runs.status_code == 200
    assert tasks.headers["Content-Language"] == "zh-hans"
    task_page = tasks.content.decode()
    for words in (
        "定时消息",
        "接收人",
        "渠道",
        "状态",
        "暂停所选任务",
        "恢复所选任务",
        "取消所选任务",
    ):
        assert words in task_page, words
    run_page = runs.content.decode()
    for words in ("运行记录", "计划时间", "已发送", "立即重试所选运行记录"):
        assert words in run_page, words
    assert "Pause selected tasks" not in task_page


def test_admin__an_action_reports_in_chinese(admin_client, make_task, settings):
    settings.LANGUAGE_CODE = "zh-hans"
    tasks = [make_task(recipient="alice"), make_task(recipient="bob")]

    response = admin_client.post(
        reverse("admin:reminders_scheduledtask_changelist"),
        {"action": "pause_tasks", "_selected_action": [task.pk for task in tasks]},
        follow=True,
    )

    assert "已暂停 2 个任务。" in response.content.decode()
    assert set(ScheduledTask.objects.values_list("status", flat=True)) == {"paused"}


def test_admin__the_browser_asks_for_english(admin_client, make_task, settings):
    settings.LANGUAGE_CODE = "zh-hans"
    make_task(recipient="alice")

    response = admin_client.get(
        reverse("admin:reminders_scheduledtask_changelist"), HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9"
    )

    assert response.headers["Content-Language"] == "en"
    assert "Pause selected tasks" in response.content.decode()
    assert "暂停所选任务" not in response.content.decode()


def test_admin__a_browser_language_outside_languages_gets_the_language_code(admin_client, settings):
    settings.LANGUAGE_CODE = "zh-hans"

    response = admin_client.get(
        reverse("admin:reminders_taskrun_changelist"), HTTP_ACCEPT_LANGUAGE="fr-FR,fr;q=0.9"
    )

    assert response.headers["Content-Language"] == "zh-hans"
    assert "运行记录" in response.content.decode()


def test_models__choices_and_names_are_translated():
    from django.utils import translation

    with translation.override("zh-hans"):
        assert str(TaskRun.Status.FAILED.label) == "失败"
        assert str(ScheduledTask._meta.verbose_name_plural) == "定时消息"
    with translation.override("en"):
        assert str(TaskRun.Status.FAILED.label) == "Failed"


def test_settings__the_suite_is_in_english():
    assert django_settings.LANGUAGE_CODE == "en-us"
    assert [code for code, _ in django_settings.LANGUAGES] == ["zh-hans", "en"]
    middleware = django_settings.MIDDLEWARE
    locale = middleware.index("django.middleware.locale.LocaleMiddleware")
    assert (
        middleware.index("django.contrib.sessions.middleware.SessionMiddleware")
        < locale
        < middleware.index("django.middleware.common.CommonMiddleware")
    )


def language_code(module: str, **env: str) -> str:
    """LANGUAGE_CODE of the settings ``module`` imported in a fresh process whose
    environment has none of the caller's LANGUAGE_CODE, plus ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in ("LANGUAGE_CODE",)}
    result = subprocess.run(
        [sys.executable, "-c", f"import {module} as s; print(s.LANGUAGE_CODE)"],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


@pytest.mark.parametrize(
    ("module", "env", "expected"),
    [
        ("config.settings", {}, "zh-hans"),
        ("config.settings", {"LANGUAGE_CODE": "en"}, "en"),
        ("tests.settings", {}, "en-us"),
        ("tests.settings", {"LANGUAGE_CODE": "zh-hans"}, "en-us"),
    ],
)
@pytest.mark.processes
def test_settings__language_code_comes_from_the_environment_but_not_in_the_suite(
    module, env, expected
):
    assert language_code(module, **env) == expected
