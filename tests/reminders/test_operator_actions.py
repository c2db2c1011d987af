"""What operators do to tasks and runs, on the models (the admin only calls these):
run a task now, retry a run (never past its deadline), mark a run handled, and see a
task's next occurrences as the scheduler will plan them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import TestCase
from django.utils import timezone

from reminders import signals
from reminders.engine import actions, dispatch, planning
from reminders.exceptions import ActionRefused, PermanentSendError
from reminders.models import MAKEUP_SUFFIX, ScheduledTask, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import run_queued, tick

pytestmark = pytest.mark.django_db

SHANGHAI = ZoneInfo("Asia/Shanghai")


def send_due(now: datetime | None = None) -> int:
    """Claim and deliver what is due, without planning new occurrences."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.claim("test", 100, now=now)
        return run_queued(now=now)


def ended(task: ScheduledTask, status: str, *, deadline: datetime | None = None) -> TaskRun:
    """A run of ``task``'s for the current hour that ended ``status``."""
    occurrence = timezone.now().replace(minute=0, second=0, microsecond=0)
    run = planning.new_run(task, occurrence)
    run.status, run.next_attempt_at, run.finished_at = status, None, timezone.now()
    run.error_code = "test"
    run.deadline = deadline
    run.save()
    return run


# Run now ---------------------------------------------------------------------------------


def test_run_now__makes_a_run_due_now_that_the_next_tick_sends(make_task, outbox):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC", payload={"content": "Call"})
    now = timezone.now()
    run, created = actions.run_now(task, now, by="alice")
    assert created is True
    assert (run.is_manual, run.requested_by, run.due_at, run.status) == (
        True,
        "alice",
        now,
        "scheduled",
    )
    assert run.ledger_key == f"{task.pk}:now:{now.astimezone(UTC):%Y-%m-%dT%H:%M}Z"
    # Its own second, never :00, so its stamp is no scheduled occurrence's.
    assert run.occurrence.second != 0 and abs(run.occurrence - now) < timedelta(seconds=2)
    # A follow-up must go within two hours of its due time, as any of its runs.
    assert run.deadline == now + timedelta(hours=2)
    assert send_due() == 1
    assert [m.recipient for m in outbox] == [task.recipient]
    assert TaskRun.objects.get(pk=run.pk).status == "sent"


def test_run_now__a_second_request_in_the_same_minute_makes_nothing_and_sends_nothing(
    make_task, outbox
):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    minute = timezone.now().replace(second=5, microsecond=0)
    first, _ = actions.run_now(task, minute)
    assert send_due(minute) == 1
    again, created = actions.run_now(task, minute + timedelta(seconds=50))
    assert (again.pk, created) == (first.pk, False)
    assert send_due(minute + timedelta(seconds=50)) == 0
    assert len(outbox) == 1
    # The next minute is another request.
    later, created = actions.run_now(task, minute + timedelta(seconds=60))
    assert created is True and later.pk != first.pk
    assert send_due(minute + timedelta(seconds=60)) == 1
    assert len(outbox) == 2


def test_run_now__a_request_while_the_last_one_waits_returns_it(make_task):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    now = timezone.now()
    first, _ = actions.run_now(task, now)
    # A double click across a minute's end: the first run has not gone yet.
    again, created = actions.run_now(task, now + timedelta(seconds=61))
    assert (again.pk, created) == (first.pk, False)
    assert task.runs.filter(is_manual=True).count() == 1


def test_run_now__two_runs_of_one_minute_share_the_key_and_send_once(make_task, outbox):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    now = timezone.now().replace(second=10)
    first, _ = actions.run_now(task, now)
    # Two requests racing past each other's check: both runs exist.
    racing = actions.new_manual_run(task, now + timedelta(seconds=3))
    racing.save()
    assert racing.ledger_key == first.ledger_key
    send_due(now + timedelta(seconds=3))  # one waits while the other holds the key
    send_due(timezone.now() + timedelta(minutes=1))
    assert len(outbox) == 1
    statuses = sorted(TaskRun.objects.filter(is_manual=True).values_list("status", flat=True))
    assert statuses == ["sent", "skipped"]


@pytest.mark.parametrize(
    ("status", "code"),
    [("paused", "paused"), ("cancelled", "cancelled"), ("error", "error")],
)
def test_run_now__refuses_a_paused_cancelled_or_errored_task(make_task, status, code):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    ScheduledTask.objects.filter(pk=task.pk).update(status=status)
    task.refresh_from_db()
    with pytest.raises(ActionRefused) as refused:
        actions.run_now(task)
    assert refused.value.code == code
    assert not task.runs.exists()


def test_run_now__a_completed_one_shot_may_run_again_under_a_stamp_of_its_own(make_task, outbox):
    task = make_task("follow_up", payload={"content": "Call ACME"})
    assert tick() == 1
    task.refresh_from_db()
    assert task.status == "completed"
    # In the very second the one-shot went: the stamp moves on a second, or the
    # provider's duplicate check would drop the message as the same one; a second more
    # if that one is :00, which a stamp shows as the minute (one-shot made at :59).
    run, created = actions.run_now(task, task.run_at)
    expected = task.run_at.replace(microsecond=0) + timedelta(seconds=1)
    if expected.second == 0:
        expected += timedelta(seconds=1)
    assert created and run.occurrence == expected
    assert send_due(task.run_at) == 1
    assert len(outbox) == 2 and outbox[0].rendered != outbox[1].rendered


def test_run_now__a_birthday_is_refused_after_its_send_by_time(make_task):
    task = make_task("birthday", cron="0 9 * * *", tz="Asia/Shanghai")
    afternoon = datetime(2026, 12, 3, 14, 0, tzinfo=SHANGHAI)
    with pytest.raises(ActionRefused) as refused:
        actions.run_now(task, afternoon)
    assert refused.value.code == "deadline"
    assert not task.runs.exists()
    morning = datetime(2026, 12, 3, 10, 0, tzinfo=SHANGHAI)
    run, _ = actions.run_now(task, morning)
    assert run.deadline == datetime(2026, 12, 3, 12, 0, tzinfo=SHANGHAI)


def test_run_now__ignores_the_working_day_calendar(make_task):
    task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
    national_day = datetime(2026, 10, 1, 10, 0, tzinfo=SHANGHAI)
    assert planning.calendar_day_off(task, national_day) is not None
    run, _ = actions.run_now(task, national_day)
    assert (run.status, run.error_code) == ("scheduled", "")


@pytest.mark.usefixtures("reports_every_day")
def test_run_now__is_outside_the_one_message_a_day_rule_both_ways(make_task, outbox):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    assert task.keyed_by_day
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=timezone.now() + timedelta(days=2))
    task.refresh_from_db()
    # Run now first: the day's own message still goes…
    actions.run_now(task)
    assert send_due() == 1
    scheduled = planning.new_run(task, timezone.now().replace(minute=0, second=0, microsecond=0))
    scheduled.next_attempt_at = timezone.now()
    scheduled.save()
    assert send_due() == 1
    # …and once the day's message went, run now still sends.
    TaskRun.objects.filter(is_manual=True).update(status="failed")  # finished: not waited on
    _run, created = actions.run_now(task, timezone.now() + timedelta(minutes=1))
    assert created and send_due(timezone.now() + timedelta(minutes=1)) == 1
    assert len(outbox) == 3
    assert TaskRun.objects.get(pk=scheduled.pk).status == "sent"


@pytest.mark.usefixtures("reports_every_day")
def test_run_now__a_failed_one_is_no_occurrence_to_make_up(make_task):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    run, _ = actions.run_now(task)
    TaskRun.objects.filter(pk=run.pk).update(status="failed", next_attempt_at=None)
    day = timedelta(days=1)
    assert planning.lost_occurrences(task, run.occurrence - day, run.occurrence + day) == []


# Retry -----------------------------------------------------------------------------------


def test_retry_now__an_expired_run_is_retried_while_its_deadline_is_ahead_and_keeps_it(
    make_task, outbox
):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    deadline = timezone.now() + timedelta(minutes=30)
    run = ended(task, "expired", deadline=deadline)
    assert actions.retry_refusal(run, timezone.now()) is None
    assert actions.retry_now(run) is True
    run.refresh_from_db()
    assert (run.status, run.attempts, run.deadline) == ("retrying", 0, deadline)
    assert send_due() == 1
    assert TaskRun.objects.get(pk=run.pk).status == "sent"


@pytest.mark.parametrize("status", ["expired", "failed", "unknown"])
def test_retry_now__refuses_a_run_whose_deadline_has_passed(make_task, status):
    """A birthday is never sent in the afternoon: retrying it then would only expire it."""
    task = make_task("birthday", cron="0 9 * * *", tz="UTC")
    run = ended(task, status, deadline=timezone.now() - timedelta(minutes=1))
    assert actions.retry_refusal(run, timezone.now()).code == "deadline"
    assert actions.retry_now(run) is False
    assert TaskRun.objects.get(pk=run.pk).status == status


def test_retry_now__refuses_a_run_a_make_up_covers(make_task):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    run = ended(task, "failed")
    makeup = planning.new_makeup(
        task, run.occurrence, planning.new_run(task, run.occurrence + timedelta(days=1))
    )
    makeup.save()
    assert makeup.ledger_key == f"{run.ledger_key}{MAKEUP_SUFFIX}"
    assert actions.retry_refusal(run, timezone.now()).code == "made_up"
    assert actions.retry_now(run) is False
    TaskRun.objects.filter(pk=makeup.pk).update(status="failed", next_attempt_at=None)
    assert actions.retry_now(run) is True  # the make-up failed too: the day is owed again


def test_retry_now__a_handled_run_is_no_longer_handled(make_task):
    run = ended(make_task("follow_up", cron="0 9 * * *", tz="UTC"), "failed")
    assert actions.mark_handled(run, "bob") is True
    assert actions.retry_now(run) is True
    run.refresh_from_db()
    assert (run.status, run.handled_at, run.handled_by) == ("retrying", None, "")


@pytest.mark.usefixtures("reports_every_day")
def test_cancel_pending__a_run_in_doubt_becomes_unknown_ops_are_told_and_it_can_be_retried(
    make_task, outbox, received, django_capture_on_commit_callbacks
):
    from reminders import api
    from reminders.exceptions import InDoubtSendError
    from reminders.models import SendLog
    from tests.support.jobs import tick

    hour = (timezone.now() + timedelta(hours=2)).hour
    schedule = {"tz": "UTC", "key": "report:1", "channel": "memory_dedup"}
    task = api.schedule("daily_report", "zhangsan", cron=f"0 {hour} * * *", **schedule)
    first = task.next_run
    MemorySender.script[:] = [InDoubtSendError("no answer (read timeout)", code="timeout")]
    assert tick(now=first + timedelta(minutes=15)) == 0
    doubtful = task.runs.get()
    assert (doubtful.status, SendLog.objects.get().status) == ("retrying", "unknown")

    # The schedule moves within the day while the run waits to send its bytes again.
    with django_capture_on_commit_callbacks(execute=True):
        api.schedule("daily_report", "zhangsan", cron=f"30 {hour} * * *", **schedule)
    doubtful.refresh_from_db()
    assert (doubtful.status, doubtful.next_attempt_at) == ("unknown", None)
    # Its task goes on: what it says to do (retry it), the admin allows.
    assert "retry it if it did not arrive" in doubtful.error_message.lower()
    assert ("run_unknown", doubtful.pk, "unknown") in received
    assert SendLog.objects.get().status == "unknown"

    # The day's re-planned run does not send beside it, and says which run to retry.
    assert tick(now=first + timedelta(minutes=45)) == 0
    moved = task.runs.get(occurrence=first + timedelta(minutes=30))
    assert (moved.status, moved.error_code) == ("skipped", "duplicate")
    assert f"{doubtful.pk}" in moved.error_message
    assert actions.retry_refusal(doubtful, timezone.now()) is None
    assert actions.retry_now(doubtful) is True
    assert tick(now=first + timedelta(minutes=45)) == 1
    assert len(outbox) == 1
    assert TaskRun.objects.get(pk=doubtful.pk).status == "sent"


# Mark handled ----------------------------------------------------------------------------


def test_mark_handled__records_who_and_when_once_and_only_on_runs_that_ended_unsent(make_task):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    failed, sent = ended(task, "failed"), ended(make_task(), "sent")
    now = timezone.now()
    assert actions.mark_handled(failed, "bob", now) is True
    assert (failed.handled_by, failed.handled_at) == ("bob", now)
    assert actions.mark_handled(failed, "carol") is False
    assert actions.handle_refusal(failed).code == "handled"
    assert actions.mark_handled(sent, "bob") is False
    assert actions.handle_refusal(sent).code == "status"
    assert TaskRun.objects.get(pk=failed.pk).handled_by == "bob"


def test_mark_handled__keeps_the_name_when_the_user_is_deleted(make_task, django_user_model):
    user = django_user_model.objects.create_user("dave")
    run = ended(make_task("follow_up", cron="0 9 * * *", tz="UTC"), "unknown")
    actions.mark_handled(run, user.get_username())
    user.delete()
    assert TaskRun.objects.get(pk=run.pk).handled_by == "dave"


# The next occurrences --------------------------------------------------------------------


def test_upcoming__is_what_the_scheduler_plans_calendar_skips_included(make_task, settings):
    settings.REMINDERS_PLAN_AHEAD_SECONDS = 0
    task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
    now = datetime(2026, 9, 29, 12, 0, tzinfo=SHANGHAI)
    upcoming = planning.upcoming(task, now, 5)
    local = [u.occurrence.astimezone(SHANGHAI) for u in upcoming]
    assert [f"{o:%m-%d %H:%M}" for o in local] == [
        "09-30 09:00",
        "10-01 09:00",
        "10-02 09:00",
        "10-03 09:00",
        "10-04 09:00",
    ]
    assert [u.day_off.code if u.day_off else None for u in upcoming] == [None] + ["holiday"] * 4
    # What the scheduler does at each of them is the same.
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=upcoming[0].occurrence)
    for u in upcoming:
        dispatch.materialize(now=u.occurrence)
    planned = list(
        task.runs.order_by("occurrence").values_list("occurrence", "due_at", "error_code")
    )
    assert planned == [
        (u.occurrence, u.due_at, u.day_off.code if u.day_off else "") for u in upcoming
    ]


def test_upcoming__a_year_the_calendar_does_not_cover_is_said_and_no_one_is_told(
    make_task, settings
):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar", "UNCOVERED": "skip"}
    }
    told = []

    def receiver(sender, **kwargs):
        told.append(kwargs)

    signals.calendar_uncovered.connect(receiver)
    try:
        task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
        with TestCase.captureOnCommitCallbacks(execute=True):
            upcoming = planning.upcoming(task, datetime(2026, 12, 30, 12, 0, tzinfo=SHANGHAI), 3)
    finally:
        signals.calendar_uncovered.disconnect(receiver)
    assert [u.day_off.code if u.day_off else None for u in upcoming] == [
        None,
        "calendar_uncovered",
        "calendar_uncovered",
    ]
    assert told == []


def test_upcoming__a_one_shot_has_its_time_or_nothing(make_task):
    at = timezone.now() + timedelta(hours=3)
    task = make_task("follow_up", at=at)
    [only] = planning.upcoming(task, timezone.now())
    assert only.occurrence == at
    assert planning.upcoming(task, at) == []


def test_run_now__a_failing_send_fails_only_that_run(make_task):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    MemorySender.script.append(PermanentSendError("no such user", code="60111"))
    run, _ = actions.run_now(task)
    send_due()
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("failed", "60111")
    task.refresh_from_db()
    assert task.status == "active"
