"""Operators racing the planner, on real transactions (PostgreSQL and MariaDB): the
planner is held inside its transaction, its runs written but not committed, while an
operator acts. Whatever the order, what the operator did holds and nothing goes twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from reminders.engine import actions, dispatch, planning
from reminders.models import MAKEUP_SUFFIX, ScheduledTask, TaskRun
from reminders.schedule import timing
from tests.support.locks import Paused, Worker, require_row_locks, statement

pytestmark = pytest.mark.django_db(transaction=True)

DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def morning(time_machine) -> None:
    """A clock before the day's 09:00 and 09:30 (UTC): the schedules below expect both
    ahead, whatever the hour the suite runs at (between the two, a change of 09:00 to
    09:30 fell due today)."""
    time_machine.move_to(datetime(2026, 3, 10, 6, 0, tzinfo=UTC), tick=True)


@pytest.fixture
def operator(django_user_model) -> Client:
    user = django_user_model.objects.create_superuser("ops", password="-")
    client = Client()
    client.force_login(user)
    return client


def planner_holding_its_runs(now) -> Paused:
    """The planner at ``now``, held right after it INSERTed the runs it planned."""
    planner = Paused(lambda: dispatch.plan(now=now), after=statement("INSERT", "reminders_taskrun"))
    planner.hold()
    return planner


def test_admin_schedule_change__runs_the_planner_inserts_meanwhile_do_not_survive(
    make_task, operator
):
    require_row_locks()
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC", key="fu:1")
    nine = task.next_run
    planner = planner_holding_its_runs(nine)
    form = {
        "kind": task.kind,
        "recipient": task.recipient,
        "channel": task.channel,
        "priority": task.priority,
        "payload": "{}",
        "key": task.key,
        "cron": "30 9 * * *",
        "run_at_0": "",
        "run_at_1": "",
        "timezone": "UTC",
    }
    url = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    admin = Worker(lambda: operator.post(url, form))
    admin.start()
    admin.blocked_or_done()
    planner.resume()
    planner.outcome()
    assert admin.outcome().status_code == 302

    task.refresh_from_db()
    assert (task.cron, task.next_run) == ("30 9 * * *", nine + timedelta(minutes=30))
    # The 09:00 run the planner made for the old schedule is cancelled with the others.
    old = task.runs.filter(occurrence=nine)
    assert old.exists()
    assert not old.filter(status__in=TaskRun.UNFINISHED).exists()


@pytest.mark.usefixtures("reports_every_day")
def test_retry_now__racing_the_planners_make_up_only_one_of_them_is_left_to_send(make_task):
    require_row_locks()
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    nine = task.next_run
    yesterday = planning.new_run(task, nine - DAY)
    yesterday.status, yesterday.next_attempt_at = TaskRun.Status.FAILED, None
    yesterday.finished_at = nine - DAY + timedelta(minutes=1)
    yesterday.save()
    planner = planner_holding_its_runs(nine)  # its make-up for yesterday, uncommitted
    retry = Worker(lambda: actions.retry_now(TaskRun.objects.get(pk=yesterday.pk)))
    retry.start()
    retry.blocked_or_done()
    planner.resume()
    planner.outcome()
    retried = retry.outcome()

    makeup = task.runs.get(is_compensation=True)
    assert makeup.ledger_key == f"{yesterday.ledger_key}{MAKEUP_SUFFIX}"
    yesterday.refresh_from_db()
    # One message for yesterday: the make-up (the retry was refused: it covers the day).
    assert retried is False
    assert yesterday.status == TaskRun.Status.FAILED
    assert makeup.status == TaskRun.Status.SCHEDULED


@pytest.mark.usefixtures("reports_every_day")
def test_retry_now__racing_a_resume_that_makes_the_day_up_only_one_of_them_is_left_to_send(
    make_task,
):
    require_row_locks()
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    nine = task.next_run
    yesterday = planning.new_run(task, nine - DAY)
    yesterday.status, yesterday.next_attempt_at = TaskRun.Status.FAILED, None
    yesterday.finished_at = nine - DAY + timedelta(minutes=1)
    yesterday.save()
    actions.pause(task)

    def resume() -> bool:
        return actions.resume(ScheduledTask.objects.get(pk=task.pk), nine + timedelta(minutes=1))

    resuming = Paused(resume, after=statement("INSERT", "reminders_taskrun"))
    resuming.hold()  # its make-up for yesterday, uncommitted
    retry = Worker(lambda: actions.retry_now(TaskRun.objects.get(pk=yesterday.pk)))
    retry.start()
    retry.blocked_or_done()
    resuming.resume()
    assert resuming.outcome() is True
    retried = retry.outcome()

    yesterday.refresh_from_db()
    makeup = task.runs.get(is_compensation=True)
    assert retried is False
    assert yesterday.status == TaskRun.Status.FAILED
    assert makeup.status == TaskRun.Status.SCHEDULED


def test_admin_schedule_change__keeps_what_the_planner_advanced_when_the_schedule_stays(
    make_task, operator
):
    """An edit that leaves the schedule alone saves its fields, not a stale copy of the
    task's state: the planner's advance of ``next_run`` stands."""
    require_row_locks()
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC", key="fu:2")
    nine = task.next_run
    form = {
        "kind": task.kind,
        "recipient": "someone.else",
        "channel": task.channel,
        "priority": task.priority,
        "payload": "{}",
        "key": task.key,
        "cron": task.cron,
        "run_at_0": "",
        "run_at_1": "",
        "timezone": "UTC",
    }
    url = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    planner = planner_holding_its_runs(nine)
    admin = Worker(lambda: operator.post(url, form))
    admin.start()
    admin.blocked_or_done()
    planner.resume()
    planner.outcome()
    assert admin.outcome().status_code == 302

    task.refresh_from_db()
    assert task.recipient == "someone.else"
    # Planned ahead up to the next occurrence past the plan-ahead horizon.
    assert task.next_run > nine
    assert task.runs.get(occurrence=nine).status == TaskRun.Status.SCHEDULED
    assert timing.local_date(task.next_run, "UTC") > timing.local_date(nine, "UTC")
