from datetime import timedelta

import pytest
from django.db import DataError, IntegrityError, transaction
from django.utils import timezone

from reminders.engine import actions, planning
from reminders.models import ScheduledTask, SendLog, TaskRun

pytestmark = pytest.mark.django_db


def raw_task(**fields) -> ScheduledTask:
    defaults = {
        "kind": "follow_up",
        "recipient": "u",
        "channel": "memory",
        "timezone": "UTC",
        "priority": "normal",
    }
    return ScheduledTask(**{**defaults, **fields})


@pytest.mark.parametrize(
    "fields", [{}, {"cron": "0 9 * * *", "run_at": timezone.now()}], ids=["neither", "both"]
)
def test_database_requires_exactly_one_of_cron_and_run_at(fields):
    with pytest.raises(IntegrityError), transaction.atomic():
        raw_task(**fields).save()


def test_database_rejects_an_empty_recipient():
    with pytest.raises(IntegrityError), transaction.atomic():
        raw_task(run_at=timezone.now(), recipient="").save()


@pytest.mark.parametrize(
    "recipient",
    [
        pytest.param("@all", id="everyone"),
        pytest.param("u1|u2", id="a list"),
        pytest.param("alice\n", id="a trailing newline"),
        pytest.param("ali\x07ce", id="a control character"),
        pytest.param("-alice", id="not starting with a letter or digit"),
        pytest.param("zhang san", id="a space"),
        pytest.param("张三", id="not ascii"),
        pytest.param("x" * 65, id="65 bytes"),
    ],
)
def test_database_rejects_a_recipient_that_is_not_one_member_id(recipient):
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        ScheduledTask.objects.bulk_create([raw_task(run_at=timezone.now(), recipient=recipient)])


def test_database_accepts_every_shape_of_member_id():
    members = ["a", "9", "zhangsan", "Li.Si-01@corp_x", "Z" + "z" * 63]
    ScheduledTask.objects.bulk_create(
        [raw_task(run_at=timezone.now(), recipient=member) for member in members]
    )
    assert sorted(ScheduledTask.objects.values_list("recipient", flat=True)) == sorted(members)


def test_database_keeps_one_run_per_task_and_occurrence(make_task):
    task = make_task()
    at = timezone.now()
    planning.new_run(task, at).save()
    with pytest.raises(IntegrityError), transaction.atomic():
        planning.new_run(task, at).save()


def test_database_keeps_one_ledger_row_per_key(make_task):
    task = make_task()
    SendLog.objects.create(key="k1", task=task, recipient="u", channel="memory", body="{}")
    with pytest.raises(IntegrityError), transaction.atomic():
        SendLog.objects.create(key="k1", task=task, recipient="u", channel="memory", body="{}")


def test_database_rejects_a_leased_run_without_a_lease(make_task):
    run = planning.new_run(make_task(), timezone.now())
    run.status = TaskRun.Status.QUEUED
    with pytest.raises(IntegrityError), transaction.atomic():
        run.save()


def test_database_allows_many_tasks_without_a_key():
    raw_task(run_at=timezone.now()).save()
    raw_task(run_at=timezone.now()).save()
    assert ScheduledTask.objects.filter(key__isnull=True).count() == 2


def test_ledger_key__is_the_local_day_for_a_daily_task(make_task):
    task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
    occurrence = task.next_run
    local_day = occurrence.astimezone(timezone.get_fixed_timezone(480)).date().isoformat()
    assert task.ledger_key(occurrence) == f"{task.pk}:{local_day}T00:00+08:00"
    # Moved within the day: the same key.
    assert task.ledger_key(occurrence + timedelta(hours=5)) == task.ledger_key(occurrence)


def test_ledger_key__another_zone_s_day_is_another_key(make_task):
    task = make_task("daily_report", cron="0 9 * * *", tz="Asia/Shanghai")
    occurrence = task.next_run
    shanghai = task.ledger_key(occurrence)
    task.timezone = "America/New_York"
    assert task.ledger_key(occurrence) != shanghai
    # A zone with the same offset names the same stretch of time: the same key.
    task.timezone = "Asia/Hong_Kong"
    assert task.ledger_key(occurrence) == shanghai


def test_ledger_key__is_the_exact_occurrence_for_a_task_firing_twice_a_day(make_task):
    task = make_task("daily_report", cron="0 9,17 * * *", tz="UTC")
    occurrence = task.next_run
    assert task.ledger_key(occurrence) == f"{task.pk}:{occurrence:%Y-%m-%dT%H:%M:%SZ}"
    assert task.ledger_key(occurrence) != task.ledger_key(occurrence + timedelta(hours=8))


def test_pause_and_resume__only_from_the_right_status(make_task):
    task = make_task("daily_report", cron="0 9 * * *")
    assert actions.resume(task) is False
    assert actions.pause(task) is True
    assert actions.pause(task) is False
    assert actions.resume(task) is True
    task.refresh_from_db()
    assert task.status == "active"
    assert task.next_run > timezone.now()


def test_resume__the_latest_occurrence_missed_while_paused_runs_and_the_others_are_recorded(
    make_task,
):
    task = make_task("follow_up", cron="0 * * * *", tz="UTC")
    first = task.next_run
    actions.pause(task)
    assert actions.resume(task, now=first + timedelta(hours=3, minutes=30)) is True
    runs = list(task.runs.order_by("occurrence").values_list("occurrence", "status", "error_code"))
    assert runs == [
        (first, "skipped", "paused"),
        (first + timedelta(hours=1), "skipped", "paused"),
        (first + timedelta(hours=2), "skipped", "paused"),
        (first + timedelta(hours=3), "scheduled", ""),
    ]
    assert "paused" in task.runs.filter(status="skipped").first().error_message
    task.refresh_from_db()
    assert (task.status, task.next_run) == ("active", first + timedelta(hours=4))


def test_resume__runs_planned_before_the_pause_follow_the_missed_run_rule_too(make_task):
    from reminders.engine import dispatch

    task = make_task("follow_up", cron="0 * * * *", tz="UTC")
    first = task.next_run
    dispatch.materialize(now=first)  # planned, then the task is paused before it goes
    task.refresh_from_db()
    actions.pause(task)
    assert actions.resume(task, now=first + timedelta(hours=2, minutes=30)) is True
    runs = list(task.runs.order_by("occurrence").values_list("occurrence", "status", "error_code"))
    assert runs == [
        (first, "skipped", "paused"),
        (first + timedelta(hours=1), "skipped", "paused"),
        (first + timedelta(hours=2), "scheduled", ""),
    ]


def test_resume__a_one_shot_whose_time_passed_while_paused_runs_now(make_task):
    at = timezone.now() + timedelta(minutes=5)
    task = make_task(at=at)
    actions.pause(task)
    assert actions.resume(task, now=at + timedelta(hours=1)) is True
    assert list(task.runs.values_list("occurrence", "status")) == [(at, "scheduled")]
    task.refresh_from_db()
    assert (task.status, task.next_run) == ("active", None)  # until its run ends


def test_retry_now__puts_a_failed_run_back_in_line(make_task):
    run = planning.new_run(make_task(), timezone.now())
    run.status = TaskRun.Status.FAILED
    run.next_attempt_at = None
    run.save()
    assert actions.retry_now(run) is True
    run.refresh_from_db()
    assert run.status == "retrying"
    assert run.next_attempt_at <= timezone.now()
    sent = planning.new_run(make_task(), timezone.now())
    sent.status = TaskRun.Status.SENT
    sent.next_attempt_at = None
    sent.save()
    assert actions.retry_now(sent) is False


def test_retry_now__an_unknown_run_is_sent_again_on_the_operators_word(make_task):
    from reminders.engine import dispatch
    from reminders.senders.memory import MemorySender
    from tests.support.jobs import run_queued

    task = make_task()
    dispatch.materialize()
    dispatch.claim("test", 10)
    run = task.runs.get()
    TaskRun.objects.filter(pk=run.pk).update(status="unknown", lease_token="", next_attempt_at=None)
    SendLog.objects.create(
        key=run.ledger_key,
        task=task,
        run=run,
        recipient=task.recipient,
        channel="memory",
        body='{"msgtype":"text","text":{"content":"hi"}}',
        status="unknown",
    )
    run.refresh_from_db()
    assert actions.retry_now(run) is True
    assert (run.status, run.attempts) == ("retrying", 0)
    assert SendLog.objects.get().status == "failed"
    dispatch.claim("test", 10)
    run_queued()
    # Never delivered, on the operator's word: the message as the task says it now.
    [message] = MemorySender.outbox
    assert message.recipient == task.recipient
    log = SendLog.objects.get()
    assert (log.status, log.body) == ("sent", message.rendered)


def test_ledger__outlives_a_deleted_task(make_task):
    task = make_task()
    SendLog.objects.create(key="k", task=task, recipient="u", channel="memory", body="{}")
    task.delete()
    assert SendLog.objects.get(key="k").task_id is None


def test_resume__a_task_in_error_is_checked_again_and_says_why_while_still_bad(make_task):
    from reminders.engine import dispatch
    from reminders.exceptions import UnplannableTask

    task = make_task("follow_up", cron="0 * * * *", tz="UTC")
    first = task.next_run
    ScheduledTask.objects.filter(pk=task.pk).update(kind="registered_elsewhere")
    dispatch.materialize(now=first)
    task.refresh_from_db()
    assert (task.status, task.error_code) == ("error", "unknown_kind")
    with pytest.raises(UnplannableTask) as excinfo:
        actions.resume(task, now=first + timedelta(minutes=30))
    assert excinfo.value.code == "unknown_kind"
    assert "registered_elsewhere" in excinfo.value.message
    task.refresh_from_db()
    assert (task.status, task.error_at) == ("error", first + timedelta(minutes=30))
    # Fixed (the kind registered again): resuming catches up like a resumed pause.
    ScheduledTask.objects.filter(pk=task.pk).update(kind="follow_up")
    task.refresh_from_db()
    assert actions.resume(task, now=first + timedelta(hours=2, minutes=30)) is True
    task.refresh_from_db()
    assert (task.status, task.error_code, task.error_message, task.error_at) == (
        "active",
        "",
        "",
        None,
    )
    runs = list(task.runs.order_by("occurrence").values_list("status", "error_code"))
    assert runs == [("skipped", "task_error")] * 2 + [("scheduled", "")]
    assert task.next_run == first + timedelta(hours=3)


def test_retry_now__refuses_a_run_of_a_cancelled_task(make_task):
    task = make_task()
    run = planning.new_run(task, timezone.now())
    run.status = TaskRun.Status.FAILED
    run.next_attempt_at = None
    run.save()
    actions.cancel(task)
    run.refresh_from_db()
    assert actions.retry_now(run) is False
    assert TaskRun.objects.get(pk=run.pk).status == "failed"
