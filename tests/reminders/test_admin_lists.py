"""What the task and run lists tell ops is true: a task's "Next run" is the next message
that will go, and kinds are named by their translated labels, not their codes."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from reminders.engine import actions, dispatch
from reminders.models import ScheduledTask, TaskRun
from reminders.schedule import readable

pytestmark = pytest.mark.django_db

TASKS = "admin:reminders_scheduledtask_changelist"
RUNS = "admin:reminders_taskrun_changelist"


def cells(html: str, column: str) -> list[str]:
    """The text of each row's cell of ``column`` in a changelist page."""
    found = re.findall(rf'<t[dh] class="field-{column}[^"]*">(.*?)</t[dh]>', html, re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in found]


def shown(task: ScheduledTask, moment) -> str:
    """A moment as the lists say it: on the clock of the task's zone, the zone named."""
    return readable.moment(moment, task.timezone)


def test_task_list__next_run_is_the_earliest_waiting_run_not_the_first_beyond_the_plan(
    admin_client, make_task
):
    """An every-minute task planned an hour ahead at 09:54: its runs for 09:55-10:54 wait,
    and ``next_run`` (where planning resumes) is 10:55. The list says 09:55."""
    task = make_task(cron="* * * * *", tz="UTC")
    dispatch.materialize(now=task.next_run - timedelta(seconds=30))
    task.refresh_from_db()
    waiting = TaskRun.objects.filter(task=task, status__in=TaskRun.WAITING)
    first = waiting.order_by("next_attempt_at").first()
    assert waiting.count() > 1 and task.next_run > first.next_attempt_at

    html = admin_client.get(reverse(TASKS)).content.decode()

    assert cells(html, "next_send") == [shown(task, first.next_attempt_at)]


def test_task_list__next_run_of_a_retry_is_its_next_attempt(admin_client, make_task):
    task = make_task(at=None, cron="0 9 * * *", tz="UTC")
    dispatch.materialize(now=task.next_run)
    run = TaskRun.objects.get(task=task)
    retry_at = run.next_attempt_at + timedelta(minutes=5)
    TaskRun.objects.filter(pk=run.pk).update(status="retrying", next_attempt_at=retry_at)

    html = admin_client.get(reverse(TASKS)).content.decode()

    assert cells(html, "next_send") == [shown(task, retry_at)]


def test_task_list__next_run_without_planned_runs_is_the_next_occurrence(admin_client, make_task):
    task = make_task(cron="0 9 * * *", tz="UTC")
    assert not task.runs.exists()

    html = admin_client.get(reverse(TASKS)).content.decode()

    assert cells(html, "next_send") == [shown(task, task.next_run)]


def test_task_list__sorts_by_the_next_run_it_shows(admin_client, make_task):
    planned = make_task(cron="* * * * *", tz="UTC", recipient="planned")
    dispatch.materialize(now=planned.next_run)
    # Due after the planned task's first run, before its next_run (an hour on).
    make_task(at=planned.next_run + timedelta(minutes=30), recipient="later")
    assert ScheduledTask.objects.get(recipient="planned").next_run > planned.next_run

    for order in ({}, {"o": "6"}):
        html = admin_client.get(reverse(TASKS), order).content.decode()
        assert cells(html, "recipient") == ["planned", "later"], order
    html = admin_client.get(reverse(TASKS), {"o": "-6"}).content.decode()
    assert cells(html, "recipient") == ["later", "planned"]


def test_lists__name_kinds_by_their_translated_label(admin_client, make_task):
    task = make_task(kind="follow_up", recipient="alice")
    dispatch.materialize(now=task.next_run)
    for url in (reverse(TASKS), reverse(RUNS)):
        html = admin_client.get(url).content.decode()
        assert "Follow-up reminder" in html, url
        assert "follow_up" not in re.sub(r'(href|value|id|name)="[^"]*"', "", html), url

    html = admin_client.get(reverse(TASKS), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert cells(html, "kind_label") == ["跟进提醒"]


def test_task_list__next_run_of_a_one_shot_whose_run_waits_is_that_run(admin_client, make_task):
    task = make_task(at=timezone.now() + timedelta(minutes=10))
    dispatch.materialize(now=task.run_at)
    task.refresh_from_db()
    run = TaskRun.objects.get(task=task)
    assert task.next_run is None and run.status == "scheduled"

    html = admin_client.get(reverse(TASKS)).content.decode()

    assert cells(html, "next_send") == [shown(task, run.next_attempt_at)]


def test_task_list__next_run_of_a_paused_task_is_not_its_waiting_run(admin_client, make_task):
    """A paused task's runs are not claimed, and are skipped when it resumes."""
    task = make_task(cron="* * * * *", tz="UTC")
    dispatch.materialize(now=task.next_run)
    task.refresh_from_db()
    actions.pause(task)

    html = admin_client.get(reverse(TASKS)).content.decode()

    assert cells(html, "next_send") == [shown(task, task.next_run)]
