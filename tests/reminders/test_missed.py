"""Missed and failed occurrences, per kind: ``skip``, ``latest`` and ``compensate``."""

import logging
from datetime import timedelta

import pytest

from reminders.engine import actions, dispatch, lost_runs, planning
from reminders.exceptions import PermanentSendError
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

# Reports on every day: these tests use the real clock's dates, which may be rest days.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("reports_every_day")]

DAY = timedelta(days=1)


def runs_of(task):
    return list(
        task.runs.order_by("occurrence").values_list(
            "occurrence", "status", "error_code", "is_compensation"
        )
    )


def texts(outbox):
    return [message.body["content"] for message in outbox]


# skip -------------------------------------------------------------------------------


def test_skip__downtime_across_several_occurrences_skips_them_all_and_sends_nothing_late(
    make_task, outbox
):
    task = make_task("birthday", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    later = first + 3 * DAY + timedelta(hours=2)
    assert tick(now=later) == 0
    assert runs_of(task) == [(first + n * DAY, "skipped", "missed", False) for n in range(4)]
    assert outbox == []
    task.refresh_from_db()
    assert task.next_run == first + 4 * DAY


def test_skip__an_occurrence_planned_on_time_still_runs(make_task, outbox):
    task = make_task("birthday", cron="0 9 * * *", tz="UTC")
    assert tick(now=task.next_run + timedelta(seconds=5)) == 1
    assert runs_of(task) == [(task.next_run, "sent", "", False)]


def test_skip__resume_from_pause_skips_everything_that_passed(make_task, outbox):
    task = make_task("birthday", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    dispatch.materialize(now=first)  # planned, then paused before it went
    task.refresh_from_db()
    actions.pause(task)
    assert actions.resume(task, now=first + 2 * DAY + timedelta(hours=1)) is True
    assert [status for _, status, _, _ in runs_of(task)] == ["skipped"] * 3
    assert tick(now=first + 2 * DAY + timedelta(hours=1)) == 0
    assert outbox == []


# latest -----------------------------------------------------------------------------


def test_latest__downtime_runs_the_most_recent_and_skips_the_others(make_task, outbox):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    assert tick(now=first + 2 * DAY + timedelta(minutes=10)) == 1
    assert runs_of(task) == [
        (first, "skipped", "missed", False),
        (first + DAY, "skipped", "missed", False),
        (first + 2 * DAY, "sent", "", False),
    ]


def test_latest__what_is_dropped_beyond_the_recorded_bound_is_counted(make_task, settings, caplog):
    settings.REMINDERS_MISSED_RUNS_RECORDED = 3
    task = make_task("follow_up", cron="0 * * * *", tz="UTC")
    first = task.next_run
    with caplog.at_level(logging.WARNING, logger="reminders.models"):
        dispatch.materialize(now=first + timedelta(hours=9, minutes=30))
    runs = runs_of(task)
    # Three missed recorded, the latest, and the next hour's planned ahead.
    assert [status for _, status, _, _ in runs] == ["skipped"] * 3 + ["scheduled"] * 2
    oldest = task.runs.order_by("occurrence").first()
    assert "6 earlier occurrences" in oldest.error_message
    assert "6 earlier occurrences" in caplog.text


# compensate -------------------------------------------------------------------------


def test_compensate__downtime_makes_up_each_missed_day_with_the_next_occurrence(make_task, outbox):
    task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
    first = task.next_run
    now = first + 2 * DAY + timedelta(minutes=10)
    dispatch.materialize(now=now)
    runs = list(task.runs.order_by("occurrence", "is_compensation"))
    statuses = [(r.occurrence, r.status, r.error_code, r.is_compensation) for r in runs]
    assert [s[1:] for s in statuses] == [
        ("skipped", "missed", False),
        ("scheduled", "", True),
        ("skipped", "missed", False),
        ("scheduled", "", True),
        ("scheduled", "", False),
    ]
    today = runs[-1]
    for missed, makeup in ((runs[0], runs[1]), (runs[2], runs[3])):
        assert "made up" in missed.error_message
        assert makeup.ledger_key == f"{missed.ledger_key}:makeup"
        assert makeup.run_date == missed.run_date
        assert makeup.next_attempt_at == today.next_attempt_at
    assert tick(now=now + timedelta(minutes=15)) == 3
    bodies = texts(outbox)
    day = str(runs[0].run_date)
    makeup = next(body for body in bodies if day in body)
    lines = makeup.splitlines()
    assert f"Make-up for {day}, missed." in lines
    assert lines[-1] == f"— {day} 09:00 · #{task.pk}"  # the stamp stays last
    own = next(body for body in bodies if str(today.run_date) in body)
    assert "Make-up" not in own
    assert sorted(SendLog.objects.values_list("key", flat=True)) == sorted(
        [runs[1].ledger_key, runs[3].ledger_key, today.ledger_key]
    )


def test_compensate__a_permanent_failure_is_made_up_at_the_next_occurrence(make_task, outbox):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    MemorySender.script[:] = [PermanentSendError("busy recipient", code="60020")]
    assert tick(now=first + timedelta(minutes=15)) == 0
    failed = task.runs.get()
    assert failed.status == "failed"
    assert tick(now=first + DAY + timedelta(minutes=15)) == 2
    failed.refresh_from_db()
    assert (failed.status, failed.ledger_key) == ("failed", failed.ledger_key)
    assert SendLog.objects.get(key=failed.ledger_key).status == "failed"  # untouched
    makeup = task.runs.get(is_compensation=True)
    assert (makeup.status, makeup.ledger_key) == ("sent", f"{failed.ledger_key}:makeup")
    assert any(f"Make-up for {failed.run_date}, missed." in body for body in texts(outbox))


def test_compensate__an_expired_run_is_made_up_too(make_task):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    dispatch.materialize(now=first)
    # The status a deadline gives a run it did not send in time.
    TaskRun.objects.filter(task=task).update(status="expired", next_attempt_at=None)
    dispatch.materialize(now=first + DAY)
    makeup = task.runs.get(is_compensation=True)
    assert makeup.run_date == task.runs.get(occurrence=first).run_date


def test_compensate__occurrences_older_than_the_max_age_are_skipped_as_too_old(make_task, settings):
    settings.REMINDERS_KINDS = {
        "daily_report": {"compensate_max_age_seconds": 36 * 3600, "calendar": ""}
    }
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    dispatch.materialize(now=first + 3 * DAY)
    missed = list(task.runs.filter(status="skipped").order_by("occurrence"))
    assert len(missed) == 3
    assert all("too old to make up" in run.error_message for run in missed[:2])
    assert "made up" in missed[2].error_message
    assert [run.occurrence.date() for run in task.runs.filter(is_compensation=True)] == [
        (first + 2 * DAY).date()
    ]


def test_compensate__a_make_up_is_never_sent_twice(make_task, outbox):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    due = first + DAY
    dispatch.materialize(now=due)
    # A second scheduler that read the task before the first one advanced it.
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=first)
    dispatch.materialize(now=due)
    assert task.runs.filter(is_compensation=True).count() == 1
    assert tick(now=due + timedelta(minutes=15)) == 2
    # The make-up's job delivered again, and the next days planned: nothing more.
    makeup = task.runs.get(is_compensation=True)
    TaskRun.objects.filter(pk=makeup.pk).update(
        status="scheduled", next_attempt_at=due, finished_at=None
    )
    assert tick(now=due + timedelta(minutes=20)) == 0
    assert task.runs.get(pk=makeup.pk).status == "sent"  # the ledger says it went
    assert len(outbox) == 2
    assert tick(now=due + DAY + timedelta(minutes=15)) == 1
    assert tick(now=due + 2 * DAY + timedelta(minutes=15)) == 1
    assert task.runs.filter(is_compensation=True).count() == 1
    assert len(outbox) == 4


def test_compensate__a_make_up_cancelled_by_a_schedule_change_is_made_again(make_task, outbox):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    dispatch.materialize(now=first + DAY + timedelta(minutes=10))  # after a day of downtime
    missed = task.runs.get(occurrence=first)
    assert missed.error_message.endswith(
        f"It is made up with the occurrence of {first + DAY:%Y-%m-%d %H:%M}."
    )
    makeup = task.runs.get(is_compensation=True)

    # Before they went, the schedule moves to 10:00 (as the API and the admin re-plan).
    task.refresh_from_db()
    task.cron = "0 10 * * *"
    planning.replan(task, first + DAY + timedelta(minutes=20))
    task.save()
    assert TaskRun.objects.get(pk=makeup.pk).status == "cancelled"
    missed.refresh_from_db()
    assert "made up with the occurrence" not in missed.error_message
    assert "Its make-up was cancelled" in missed.error_message

    ten = first + DAY + timedelta(hours=1)
    assert tick(now=ten + timedelta(minutes=15)) == 2
    makeup.refresh_from_db()
    assert (makeup.status, makeup.due_at) == ("sent", task.runs.get(occurrence=ten).due_at)
    missed.refresh_from_db()
    assert missed.error_message.startswith("Occurrence passed while no scheduler was running.")
    assert missed.error_message.endswith(
        f"It is made up with the occurrence of {ten:%Y-%m-%d %H:%M}."
    )
    assert f"Make-up for {first:%Y-%m-%d}, missed." in texts(outbox)[-1] + texts(outbox)[0]


def test_compensate__resume_from_pause_makes_up_what_passed(make_task, outbox):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    dispatch.materialize(now=first)  # planned, then paused before it went
    task.refresh_from_db()
    actions.pause(task)
    now = first + 2 * DAY + timedelta(hours=1)
    assert actions.resume(task, now=now) is True
    assert [(status, code, makeup) for _, status, code, makeup in runs_of(task)] == [
        ("skipped", "paused", False),
        ("scheduled", "", True),
        ("skipped", "paused", False),
        ("scheduled", "", True),
        ("scheduled", "", False),
    ]
    assert tick(now=now + timedelta(minutes=15)) == 3


def test_compensate__a_make_up_that_fails_is_not_made_up_again(make_task):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    dispatch.materialize(now=first + DAY)
    TaskRun.objects.filter(task=task, is_compensation=True).update(
        status="failed", next_attempt_at=None
    )
    dispatch.materialize(now=first + 2 * DAY)
    assert task.runs.filter(is_compensation=True).count() == 1


def test_compensate__a_make_up_goes_by_the_deadline_of_the_run_it_rides_with(
    make_task, outbox, settings
):
    # A report kind with a deadline: the make-up is for a day long past, but it is
    # sent with today's run and expires only with it.
    settings.REMINDERS_KINDS = {"daily_report": {"max_lateness_seconds": 3600, "calendar": ""}}
    task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
    first = task.next_run
    now = first + DAY + timedelta(minutes=10)
    dispatch.materialize(now=now)
    today = task.runs.get(is_compensation=False, status="scheduled")
    makeup = task.runs.get(is_compensation=True)
    assert makeup.deadline == today.deadline == today.due_at + timedelta(hours=1)
    assert tick(now=now + timedelta(minutes=15)) == 2
    assert set(task.runs.exclude(status="skipped").values_list("status", flat=True)) == {"sent"}


def test_compensate__rest_days_owe_nothing_and_make_ups_wait_for_a_working_day(
    make_task, outbox, settings
):
    from datetime import UTC, datetime

    # On the Chinese calendar (the reports' own): 29-30 Sep 2026 are working days, 1-7
    # Oct the National Day holiday, 8 Oct a working day again.
    settings.REMINDERS_KINDS = {"daily_report": {"compensate_max_age_seconds": 14 * 86400}}

    def nine_in_shanghai(month: int, day: int) -> datetime:
        return datetime(2026, month, day, 1, 0, tzinfo=UTC)

    task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=nine_in_shanghai(9, 29))
    # Down until the holiday: the latest occurrence (2 Oct) is a day off, nothing goes.
    assert tick(now=nine_in_shanghai(10, 2) + timedelta(hours=1)) == 0
    assert not task.runs.filter(is_compensation=True).exists()
    # Back on the first working day: the two missed working days are made up with it,
    # and no holiday is.
    assert tick(now=nine_in_shanghai(10, 8) + timedelta(minutes=15)) == 3
    makeups = task.runs.filter(is_compensation=True, status="sent")
    assert sorted(str(run.run_date) for run in makeups) == ["2026-09-29", "2026-09-30"]
    holidays = task.runs.filter(error_code="holiday").values_list("run_date", flat=True)
    assert sorted(day.day for day in holidays) == [1, 2, 3, 4, 5, 6, 7]


def test_compensate__a_batch_reads_its_tasks_history_in_one_statement_each_its_own(make_task):
    """A 09:00 wave of daily reports cost the plan a statement a report, each reading
    its task's lost runs (``lost_occurrences``); the batch now reads them all at once
    (``lost_runs.History``), and each task still makes up its own lost day only."""
    tasks = [make_task("daily_report", cron="0 9 * * *", tz="UTC") for _ in range(6)]
    first = tasks[0].next_run
    assert all(task.next_run == first for task in tasks)
    dispatch.materialize(now=first)
    lost = {tasks[1].pk: "failed", tasks[4].pk: "expired"}
    for pk, status in lost.items():
        TaskRun.objects.filter(task_id=pk).update(status=status, next_attempt_at=None)
    TaskRun.objects.exclude(task_id__in=list(lost)).update(status="sent", next_attempt_at=None)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as plan:
        dispatch.materialize(now=first + DAY)
    q = connection.ops.quote_name
    shape = f"{q('ledger_key')} AS {q('ledger_key')}, {q('reminders_taskrun')}.{q('status')} AS"
    history = [q["sql"] for q in plan.captured_queries if shape in q["sql"]]
    assert len(history) == 1, history
    makeups = TaskRun.objects.filter(is_compensation=True)
    assert sorted(makeups.values_list("task_id", flat=True)) == sorted(lost)
    for makeup in makeups:
        own = TaskRun.objects.get(task_id=makeup.task_id, occurrence=first)
        assert makeup.ledger_key == f"{own.ledger_key}:makeup"


def test_compensate__history_read_for_a_batch_is_what_each_task_reads_alone(make_task):
    """``History.of`` gives each task the rows its own statement gives: the same
    occurrences owed, for every window asked, and nothing of another task's."""
    tasks = [make_task("daily_report", cron="0 9 * * *", tz="UTC") for _ in range(3)]
    first = tasks[0].next_run
    for day in range(4):
        dispatch.materialize(now=first + day * DAY)
        TaskRun.objects.filter(status="scheduled").update(
            status=["failed", "expired", "sent"][day % 3], next_attempt_at=None
        )
    TaskRun.objects.filter(task=tasks[2]).update(status="sent")
    now = first + 4 * DAY
    history = lost_runs.History.read(tasks, now)
    for task in tasks:
        assert history.of(task, now - 3 * DAY) is not None  # read for the batch
        for since_days, before_days in ((3, 4), (2, 3), (1, 4), (3, 2)):
            since, before = now - since_days * DAY, now - before_days * DAY + DAY
            alone = planning.lost_occurrences(task, since, before)
            batch = planning.lost_occurrences(task, since, before, history=history)
            assert batch == alone, (task.pk, since_days, before_days)
    assert planning.lost_occurrences(tasks[2], now - 4 * DAY, now, history=history) == []
    assert planning.lost_occurrences(tasks[0], now - 4 * DAY, now, history=history) != []
