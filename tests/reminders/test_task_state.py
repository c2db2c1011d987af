"""A task's status tells the truth about its runs: a schedule with no occurrence left
is ``completed`` only once every run it planned has ended; while one waits, the task is
``active`` (it may still be paused or cancelled, and its run still goes)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone

from reminders.engine import actions, dispatch
from reminders.engine.worker import COMPLETE_SECONDS, ReminderWorker
from reminders.exceptions import PermanentSendError
from reminders.models import DIGEST_KEY, ScheduledTask, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.digests import THURSDAY, at, follow_up, release
from tests.support.jobs import run_queued, tick


def status_of(task: ScheduledTask) -> str:
    task.refresh_from_db()
    return task.status


def test_one_shot__is_active_while_its_planned_run_waits(make_task):
    task = make_task(at=timezone.now() + timedelta(minutes=10))
    dispatch.materialize()
    assert task.runs.get().status == "scheduled"
    task.refresh_from_db()
    assert (task.status, task.next_run) == ("active", None)


def test_one_shot__completes_once_its_run_is_sent(make_task, outbox):
    task = make_task()
    assert tick() == 1
    assert task.runs.get().status == "sent"
    assert status_of(task) == "completed"


def test_one_shot__completes_once_its_run_fails_for_good(make_task):
    task = make_task()
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")]
    assert tick() == 0
    assert task.runs.get().status == "failed"
    assert status_of(task) == "completed"


def test_one_shot__completes_once_its_run_expires(make_task):
    task = make_task()
    dispatch.materialize()
    TaskRun.objects.filter(task=task).update(deadline=timezone.now() - timedelta(seconds=1))
    assert dispatch.expire_overdue() == 1
    assert status_of(task) == "completed"


def test_tick__completes_a_one_shot_whose_run_ended_elsewhere(make_task):
    task = make_task()
    dispatch.materialize()
    TaskRun.objects.filter(task=task).update(status=TaskRun.Status.CANCELLED)
    assert status_of(task) == "active"
    with TestCase.captureOnCommitCallbacks(execute=True):
        ReminderWorker(with_cluster=False).tick()
    assert status_of(task) == "completed"


def test_complete_ended__leaves_schedules_with_occurrences_and_waiting_runs(make_task):
    waiting = make_task(at=timezone.now() + timedelta(minutes=10))
    later = make_task(at=timezone.now() + timedelta(days=2))
    daily = make_task("daily_report", cron="0 9 * * *")
    dispatch.materialize()
    assert ScheduledTask.objects.complete_ended() == 0
    assert [status_of(t) for t in (waiting, later, daily)] == ["active"] * 3


def test_ran__stamps_every_task_and_completes_those_whose_runs_all_ended(make_task):
    """The job's closing UPDATE, written by hand: each task of the job gets its last run,
    and only an active task with no occurrence left and no unfinished run completes,
    its ``updated_at`` stamped with it (on MariaDB too, where a SET's assignments see
    the ones before them)."""
    ended = make_task(recipient="ended")
    waiting = make_task(recipient="waiting")
    paused = make_task(recipient="paused")
    daily = make_task("daily_report", cron="0 9 * * *", recipient="daily")
    untouched = make_task(recipient="untouched")
    dispatch.materialize()
    TaskRun.objects.exclude(task=waiting).update(status=TaskRun.Status.SENT)
    ScheduledTask.objects.filter(pk=paused.pk).update(status=ScheduledTask.Status.PAUSED)
    before = {t.pk: t.updated_at for t in ScheduledTask.objects.all()}
    now = timezone.now() + timedelta(minutes=1)
    among = {ended.pk, waiting.pk, paused.pk, daily.pk}
    assert ScheduledTask.objects.ran(among, now) == 4
    assert ScheduledTask.objects.ran(set(), now) == 0
    rows = {t.pk: t for t in ScheduledTask.objects.all()}
    assert {pk: (t.status, t.last_run_at) for pk, t in rows.items()} == {
        ended.pk: ("completed", now),
        waiting.pk: ("active", now),
        paused.pk: ("paused", now),
        daily.pk: ("active", now),
        untouched.pk: ("active", None),
    }
    assert rows[ended.pk].updated_at == now
    assert all(rows[pk].updated_at == before[pk] for pk in rows if pk != ended.pk)


def test_pause__a_one_shot_whose_run_waits_is_paused_and_its_run_held(make_task):
    task = make_task(at=timezone.now() + timedelta(minutes=10))
    dispatch.materialize()
    task.refresh_from_db()
    assert actions.pause(task) is True
    assert status_of(task) == "paused"
    later = timezone.now() + timedelta(minutes=11)
    assert not TaskRun.objects.claimable(later).exists()


def test_resume__a_one_shot_whose_run_waits_is_active_again(make_task):
    at = timezone.now() + timedelta(minutes=10)
    task = make_task(at=at)
    dispatch.materialize()
    actions.pause(task)
    assert actions.resume(task, now=at + timedelta(minutes=1)) is True
    assert status_of(task) == "active"
    assert list(task.runs.values_list("status", flat=True)) == ["scheduled"]


@pytest.mark.parametrize(("status", "listed"), [("completed", False), ("active", True)])
def test_task_changelist__status_filter_follows_a_one_shot_s_waiting_run(
    admin_client, make_task, status, listed
):
    task = make_task(at=timezone.now() + timedelta(minutes=10))
    dispatch.materialize()
    url = reverse("admin:reminders_scheduledtask_changelist")
    shown = admin_client.get(url, {"status__exact": status}).context["cl"].result_list
    assert (task in shown) is listed


def sent_one_shot(make_task) -> ScheduledTask:
    task = make_task(payload={"content": "Call ACME"})
    assert tick() == 1
    assert status_of(task) == "completed"
    return task


def test_run_now__a_completed_one_shot_is_active_until_that_run_ends(make_task, outbox):
    task = sent_one_shot(make_task)
    run, created = actions.run_now(task, timezone.now() + timedelta(seconds=5))
    assert created and run.status == "scheduled"
    assert status_of(task) == "active"
    assert tick(timezone.now() + timedelta(seconds=6)) == 1
    assert status_of(task) == "completed"


def test_retry_now__a_completed_one_shot_is_active_until_the_run_ends(make_task):
    task = make_task()
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")]
    tick()
    assert status_of(task) == "completed"
    assert actions.retry_now(task.runs.get()) is True
    assert status_of(task) == "active"


def test_snooze__a_completed_one_shot_is_active_until_the_snoozed_run_ends(make_task, outbox):
    task = sent_one_shot(make_task)
    later = actions.snooze(task.runs.get(), timezone.now() + timedelta(hours=1))
    assert later.status == "scheduled"
    assert status_of(task) == "active"


@pytest.mark.django_db
def test_digest__its_items_one_shots_and_its_own_task_complete_once_it_is_sent(settings, outbox):
    settings.REMINDERS_KINDS = {
        "follow_up": {"digest_seconds": 900, "max_lateness_seconds": 400 * 24 * 3600}
    }
    tasks = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (0, 5)]
    goes = release("alice", at(THURSDAY, 9, 15))
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=at(THURSDAY, 9))
    assert [status_of(task) for task in tasks] == ["active", "active"]
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.claim("test", 100, now=goes)
        assert run_queued(now=goes) == 1
    digest = ScheduledTask.objects.get(payload__has_key=DIGEST_KEY)
    assert [status_of(task) for task in [*tasks, digest]] == ["completed"] * 3


def test_tick__sweeps_for_tasks_whose_runs_ended_elsewhere_at_most_every_complete_seconds(
    make_task,
):
    worker, now = ReminderWorker(with_cluster=False), timezone.now()
    first, second = make_task(), make_task()
    dispatch.materialize(now)
    TaskRun.objects.filter(task=first).update(status=TaskRun.Status.CANCELLED)
    worker.tick(now)
    assert (status_of(first), status_of(second)) == ("completed", "active")
    TaskRun.objects.filter(task=second).update(status=TaskRun.Status.CANCELLED)
    worker.tick(now + timedelta(seconds=COMPLETE_SECONDS - 1))
    assert status_of(second) == "active"
    worker.tick(now + timedelta(seconds=COMPLETE_SECONDS))
    assert status_of(second) == "completed"


def test_run_now__a_task_a_job_completed_beside_it_unseeing_is_active_once_it_commits(make_task):
    """A job ending the one-shot's other run as the run now is made does not see the new
    run before it commits, and completes the task: once the run now commits, the task
    is active again."""
    task = make_task(at=timezone.now() + timedelta(minutes=10))
    dispatch.materialize()
    task.refresh_from_db()
    with TestCase.captureOnCommitCallbacks(execute=True):
        run, created = actions.run_now(task)
        # What that job's UPDATE did, from before the run now committed.
        ScheduledTask.objects.filter(pk=task.pk).update(status=ScheduledTask.Status.COMPLETED)
    assert created and run.status == "scheduled"
    assert status_of(task) == "active"


def test_plan__a_one_shot_whose_only_run_is_planned_skipped_completes_at_once(make_task):
    # 2026-10-01, National Day: the report's one occurrence is planned skipped (a day off).
    holiday = timezone.datetime.fromisoformat("2026-10-01T09:00:00+08:00")
    task = make_task("daily_report", at=holiday, tz="Asia/Shanghai")
    dispatch.materialize(now=holiday - timedelta(minutes=1))
    assert task.runs.get().status == "skipped"
    assert status_of(task) == "completed"


def test_plan__one_shots_whose_runs_wait_are_not_asked_to_complete(make_task):
    """Planning a wave of one-shots sends no completion statement: each has a run
    waiting, and its job completes it (the statement looked at every one's runs)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    tasks = [make_task(at=timezone.now() + timedelta(minutes=5)) for _ in range(20)]
    with CaptureQueriesContext(connection) as queries:
        dispatch.materialize()
    completing = [q["sql"] for q in queries.captured_queries if "completed" in q["sql"]]
    assert completing == []
    assert {status_of(task) for task in tasks} == {"active"}
